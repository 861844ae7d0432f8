"""The allocator settings and trim (registry/runtime/memory.py): real calls into the C library."""

from __future__ import annotations

import platform

import pytest

from registry.runtime import memory

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's allocator only")


@glibc
def test_on_glibc_the_allocator_takes_the_settings_and_trims():
    assert memory.tune() is True
    assert isinstance(memory.trim(), bool)


@glibc
def test_a_freed_large_block_leaves_the_process():
    def resident_mb() -> float:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * 4096 / 1e6

    memory.tune()
    before = resident_mb()
    blocks = [bytes(200_000) + bytes([n % 256]) for n in range(500)]  # 100 MB in blocks of 200 KB
    assert resident_mb() - before > 80
    del blocks
    memory.trim()
    assert resident_mb() - before < 20


def test_without_glibc_both_are_no_ops(monkeypatch):
    monkeypatch.setattr(memory, "_LIBC", None)
    assert memory.tune() is False
    assert memory.trim() is False
