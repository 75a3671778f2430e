# workerd config of the SQL engine fixture (engine.py starts `workerd serve` on it).
# The storage path and the listening socket are given on the command line (--directory-path,
# --socket-addr), so one config serves every test session.
using Workerd = import "/workerd/workerd.capnp";

const config :Workerd.Config = (
  services = [
    (name = "engine", worker = .engine),
    (name = "storage", disk = (path = "storage", writable = true)),
  ],
  sockets = [(name = "http", address = "127.0.0.1:0", http = (), service = "engine")],
);

const engine :Workerd.Worker = (
  modules = [(name = "sql_engine.js", esModule = embed "sql_engine.js")],
  # the compatibility date of wrangler.toml, so the engine behaves as the deployed objects' does
  compatibilityDate = "2026-04-01",
  durableObjectNamespaces = [(className = "SqlEngine", uniqueKey = "archetype-sql-engine", enableSql = true)],
  # SQLite-backed objects need disk storage (in-memory storage has no SQL API)
  durableObjectStorage = (localDisk = "storage"),
  bindings = [(name = "ENGINE", durableObjectNamespace = "SqlEngine")],
);
