"""The Go xDS programs' build fixture (tests/interop/xds_go.py), for the mesh's end-to-end test."""

from tests.interop.xds_go import xds_go_binary  # noqa: F401 (a fixture, found by name)
