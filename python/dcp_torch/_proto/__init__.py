"""The dcp.v1 gRPC stubs, generated from proto/dcp/v1/*.proto by
python/build_stubs.py at install or test time (never committed)."""
