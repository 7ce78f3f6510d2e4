from serve_util import start_server  # noqa: F401  (the fixture)
