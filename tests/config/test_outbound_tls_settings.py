"""EUREKA_OUTBOUND_CA_FILE, EUREKA_OUTBOUND_CERT_FILE and EUREKA_OUTBOUND_KEY_FILE: read into one
section, checked when the settings are parsed, and a node does not start with a file it cannot use."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import trustme

from registry.config.eureka import parse_config
from registry.domain.config import BadSetting
from tests.tls_servers import node_files, write_pem

ROOT = Path(__file__).resolve().parents[2]


def test_the_files_are_read_into_one_section_and_give_one_shared_set_of_contexts(tmp_path):
    ca = trustme.CA()
    ca_file = write_pem(tmp_path, "ca.pem", ca.cert_pem.bytes())
    cert_file, key_file = node_files(tmp_path, ca, "node-a")
    config = parse_config(
        {
            "EUREKA_OUTBOUND_CA_FILE": ca_file,
            "EUREKA_OUTBOUND_CERT_FILE": cert_file,
            "EUREKA_OUTBOUND_KEY_FILE": key_file,
        }
    )
    assert (config.outbound_tls.ca_file, config.outbound_tls.cert_file) == (ca_file, cert_file)
    assert config.outbound_tls.contexts() is config.outbound_tls.contexts()
    assert config.outbound_tls.contexts().has_client_cert


def test_by_default_nothing_is_named():
    tls = parse_config({}).outbound_tls
    assert (tls.ca_file, tls.cert_file, tls.key_file) == ("", "", "")


def test_a_key_that_does_not_match_is_a_bad_setting_naming_the_key_variable(tmp_path):
    ca = trustme.CA()
    cert_file, _ = node_files(tmp_path, ca, "node-a")
    _, other_key = node_files(tmp_path, ca, "node-b", prefix="other")
    with pytest.raises(BadSetting) as refused:
        parse_config({"EUREKA_OUTBOUND_CERT_FILE": cert_file, "EUREKA_OUTBOUND_KEY_FILE": other_key})
    assert refused.value.variable == "EUREKA_OUTBOUND_KEY_FILE"


def test_a_node_does_not_start_with_a_ca_file_it_cannot_read(tmp_path):
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "eureka_site.settings",
        "EUREKA_DATA_DIR": str(tmp_path),
        "EUREKA_OUTBOUND_CA_FILE": str(tmp_path / "no-such-ca.pem"),
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0
    assert "EUREKA_OUTBOUND_CA_FILE: cannot read" in result.stderr
