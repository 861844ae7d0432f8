"""Instance records keep one string for the values a fleet repeats (registry/domain/instances.py).

Each parsed body brings new strings; a registry of 100,000 instances held ~55 MB of equal copies of
app names, VIPs, statuses and metadata. Equality, and so every byte served, is unchanged: these
tests look at identity, which is what the sharing changes.
"""

from __future__ import annotations

from dataclasses import fields

import orjson

from registry.domain import constants as c
from registry.domain.core import Registry, RegistryRules
from registry.domain.instances import (
    SHARED_TEXT_FIELDS,
    TEXT_FIELDS,
    InstanceInfo,
    data_center_info,
    record_bytes,
)
from registry.wire.codecs import JSON, XML, decode_instance
from tests.factories import instance_body

FAST = {
    "expected_number_of_clients_sending_renews": 0,
    "default_open_for_traffic_count": 0,
    "expected_clients_move_only_above_zero": False,
}


def decoded(number: int, host: str | None = None) -> InstanceInfo:
    body = instance_body(
        app="orders",
        host=host or f"10.0.0.{number}",
        vip="orders-vip",
        metadata={"zone": "zone-a", "version": "1.4.2", "management.port": "8081"},
    )
    body["instance"]["appGroupName"] = "shop"
    body["instance"]["asgName"] = "orders-asg"
    return decode_instance(orjson.dumps(body), JSON, 1_000, path_app="ORDERS")


def test_records_from_separate_bodies_share_the_repeated_values():
    first, second = decoded(1), decoded(2)
    assert first == first.evolve() and first.app == "ORDERS"
    for name in SHARED_TEXT_FIELDS:
        assert getattr(first, name) is getattr(second, name), name
    for key, value in first.metadata.items():
        (other_key, other_value) = next((k, v) for k, v in second.metadata.items() if k == key)
        assert key is other_key and value is other_value, key
    assert first.data_center_info is second.data_center_info
    # What differs per instance is kept as it came.
    assert first.host_name != second.host_name


def test_an_address_sent_as_the_host_name_too_is_kept_once():
    record = decoded(1)
    assert record.ip_addr == record.host_name == "10.0.0.1"
    assert record.ip_addr is record.host_name
    named = decode_instance(
        orjson.dumps(instance_body(app="ORDERS", host="orders-1.local", ipAddr="10.0.0.9")), JSON, 1_000
    )
    assert (named.host_name, named.ip_addr) == ("orders-1.local", "10.0.0.9")


def test_an_xml_body_shares_them_too():
    xml = (
        "<instance><instanceId>{id}</instanceId><hostName>{id}</hostName><app>ORDERS</app>"
        "<ipAddr>{id}</ipAddr><status>UP</status><vipAddress>orders-vip</vipAddress>"
        '<dataCenterInfo class="com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo">'
        "<name>MyOwn</name></dataCenterInfo><metadata><zone>zone-a</zone></metadata></instance>"
    )
    first = decode_instance(xml.format(id="10.0.0.1").encode(), XML, 1_000)
    second = decode_instance(xml.format(id="10.0.0.2").encode(), XML, 1_000)
    assert first.vip_address is second.vip_address and first.app is second.app
    assert first.metadata["zone"] is second.metadata["zone"]
    assert first.data_center_info is second.data_center_info


def test_records_restored_from_a_snapshot_share_them_with_each_other_and_new_registrations():
    before = Registry(RegistryRules(**FAST), 1_000)
    before.register(decoded(1), 1_000)
    before.register(decoded(2), 1_000)
    state = orjson.loads(orjson.dumps(before.saved_state.export_parts(2_000).as_state()))
    after = Registry(RegistryRules(**FAST), 3_000)
    assert after.saved_state.restore(state, 3_000) == 2
    (first, second) = after.reads.instances()[0][1]
    for name in SHARED_TEXT_FIELDS:
        assert getattr(first, name) is not None, name
        assert getattr(first, name) is getattr(second, name), name
    assert first.ip_addr is first.host_name
    fresh = decoded(3)
    assert first.app is fresh.app and first.vip_address is fresh.vip_address
    assert first.metadata["zone"] is fresh.metadata["zone"]
    assert first.data_center_info is fresh.data_center_info


def test_a_data_center_with_metadata_is_a_record_of_its_own():
    amazon = data_center_info("Amazon", {"instance-id": "i-1"})
    assert amazon.metadata == {"instance-id": "i-1"}
    assert amazon is not data_center_info("Amazon", {"instance-id": "i-1"})
    assert data_center_info("MyOwn") is data_center_info("MyOwn", {})
    assert data_center_info("Netflix") is data_center_info("Netflix") and "Netflix" in c.DATA_CENTER_NAMES


def test_a_records_size_counts_the_utf8_bytes_of_every_text_it_holds():
    plain = InstanceInfo(instance_id="i", app="A", host_name="h", ip_addr="1")
    base = record_bytes(plain)
    # Every text field counts (a field added to the record later is counted without a change here).
    for name in TEXT_FIELDS:
        grown = plain.evolve(**{name: (getattr(plain, name) or "") + "xyz"})
        assert record_bytes(grown) == base + 3, name
    assert record_bytes(plain.evolve(metadata={"k": "é"})) == base + 1 + 2
    amazon = plain.evolve(data_center_info=data_center_info("Amazon", {"instance-id": "i-1"}))
    assert record_bytes(amazon) == base - len("MyOwn") + len("Amazon") + len("instance-id") + len("i-1")


# What a record holds besides text: bounded numbers and flags, and the two mappings counted apart.
NOT_TEXT = {
    "port",
    "port_enabled",
    "secure_port",
    "secure_port_enabled",
    "country_id",
    "data_center_info",
    "renewal_interval_secs",
    "duration_secs",
    "metadata",
    "is_coordinating_discovery_server",
    "last_updated_timestamp",
    "last_dirty_timestamp",
}


def test_every_field_of_a_record_is_counted_in_its_size_or_holds_no_text():
    assert {f.name for f in fields(InstanceInfo)} - set(TEXT_FIELDS) == NOT_TEXT
    assert {"home_page_url", "vip_address", "app_group_name", "asg_name"} <= set(TEXT_FIELDS)
