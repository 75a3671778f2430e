"""Component classes used by the tests, in separate modules on purpose (identity across modules)."""
