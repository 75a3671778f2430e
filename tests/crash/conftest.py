"""Real-process crash tests (SIGKILL at the worst moment). They are part of `./dev test` and CI,
never skipped; `-m crash` selects them alone."""


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "crash: real-process SIGKILL tests of tests/crash (run in ./dev test and CI)")
