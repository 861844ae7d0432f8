"""Writes a hostile or broken client sends (issue 30, items 1 and 7): no instance taken over for good
through a lastDirtyTimestamp far in the future, no lease longer than the cap, no app name or id that
cannot be a path segment, no more instances or metadata than the limits, and (issue 34) no record
larger than its cap, from a client or a peer. A refusal is a clear plain-text 400 (503 for a full
registry) and leaves the registry exactly as it was."""

from __future__ import annotations

import json

import pytest

from registry.domain.instances import record_bytes
from registry.wire.codecs import JSON, decode_instance
from tests.factories import instance_body

from .api_support import AMAZON_DC_CLASS, REPLICATION, enc, get_json, registry_state
from .api_support import register as post_registration

FIVE_MINUTES = 5 * 60_000
LONG_MAX = 2**63 - 1
PAY_1 = "/eureka/apps/PAY/pay-1"


def pay_1(host: str, last_dirty: int, **extra) -> dict:
    return instance_body(app="PAY", host=host, instance_id="pay-1", last_dirty=last_dirty, **extra)


def register(api, body: dict, **extra):
    response = post_registration(api, body, **extra)
    assert response.status_code == 204, response.content
    return response


def served(api, path: str = PAY_1) -> dict:
    return get_json(api, path)["instance"]


def refusal(response, status: int) -> str:
    assert response.status_code == status, (response.status_code, response.content[:300])
    assert response["Content-Type"].startswith("text/plain")
    return response.content.decode().strip()


@pytest.fixture
def limits(edit_config):
    """Small limits, and leases that expire (no self-preservation); request this before ``api``."""
    edit_config(
        registry__enable_self_preservation=False,
        registry__max_instances=2,
        registry__max_metadata_keys=4,
        registry__max_metadata_bytes=200,
    )


# ------------------------------------------------------------------------ lastDirtyTimestamp


def test_a_hijack_with_a_far_future_dirty_timestamp_gives_way_to_the_real_instance_after_5_minutes(
    api, clock
):
    registered_at = clock.now
    register(api, pay_1("10.0.0.1", last_dirty=registered_at))
    # The attacker's copy of PAY/pay-1, newer than anything the real instance will ever send.
    register(api, pay_1("10.6.6.6", last_dirty=LONG_MAX))

    hijacked = served(api)
    assert hijacked["ipAddr"] == "10.6.6.6"
    assert int(hijacked["lastDirtyTimestamp"]) == registered_at + FIVE_MINUTES

    # Its heartbeats (an older timestamp, from a client) keep the lease; its re-registration within
    # the five minutes still loses to the newer copy, as Eureka's rule says.
    clock.advance(FIVE_MINUTES - 1_000)
    heartbeat = f"{PAY_1}?status=UP&lastDirtyTimestamp={registered_at}"
    assert api.put(heartbeat).status_code == 200
    register(api, pay_1("10.0.0.1", last_dirty=clock.now))
    assert served(api)["ipAddr"] == "10.6.6.6"

    # Past the five minutes, its next registration (a Java client re-registers with a fresh
    # timestamp) is the newer copy and wins.
    clock.advance(2_000)
    register(api, pay_1("10.0.0.1", last_dirty=clock.now))
    restored = served(api)
    assert restored["ipAddr"] == "10.0.0.1"
    assert int(restored["lastDirtyTimestamp"]) == clock.now


def test_a_far_future_dirty_timestamp_sent_with_the_replication_header_is_lowered_too(api, clock):
    # With API accounts off anyone may send the header; a peer's own copy is never this far ahead.
    register(api, pay_1("10.6.6.6", last_dirty=LONG_MAX), **REPLICATION)

    assert int(served(api)["lastDirtyTimestamp"]) == clock.now + FIVE_MINUTES


def test_a_status_call_cannot_store_a_far_future_dirty_timestamp(api, clock):
    register(api, pay_1("10.0.0.1", last_dirty=clock.now))
    called_at = clock.now

    assert api.put(f"{PAY_1}/status?value=OUT_OF_SERVICE&lastDirtyTimestamp={LONG_MAX}").status_code == 200
    assert int(served(api)["lastDirtyTimestamp"]) == called_at + FIVE_MINUTES
    assert api.delete(f"{PAY_1}/status?value=UP&lastDirtyTimestamp={LONG_MAX}").status_code == 200

    clock.advance(FIVE_MINUTES + 1_000)
    register(api, pay_1("10.0.0.1", last_dirty=clock.now, metadata={"release": "2"}))
    assert served(api)["metadata"] == {"release": "2"}


def test_a_client_whose_clock_runs_an_hour_ahead_is_lowered_and_still_renews(api, clock):
    ahead = clock.now + 3_600_000
    register(api, pay_1("10.0.0.1", last_dirty=ahead))
    assert int(served(api)["lastDirtyTimestamp"]) == clock.now + FIVE_MINUTES

    # Its heartbeats carry its own timestamp, newer than the stored (lowered) one: compared, each
    # would answer 404 and make the client re-register every 30 seconds.
    for _ in range(3):
        clock.advance(30_000)
        assert api.put(f"{PAY_1}?status=UP&lastDirtyTimestamp={ahead}").status_code == 200

    # A newer timestamp within the five minutes still asks the client to register again (Eureka's).
    stored = int(served(api)["lastDirtyTimestamp"])
    assert api.put(f"{PAY_1}?status=UP&lastDirtyTimestamp={stored + 1}").status_code == 404


# ------------------------------------------------------------------------------ lease caps


def test_lease_times_above_an_hour_are_lowered_to_an_hour_not_refused(limits, api, clock):
    # A real config may ask for a week (Spring: lease-expiration-duration-in-seconds): it registers.
    lease = {"renewalIntervalInSecs": 86_400, "durationInSecs": 7 * 86_400}
    register(api, pay_1("10.0.0.1", last_dirty=clock.now, leaseInfo=lease))

    lease_info = served(api)["leaseInfo"]
    assert (lease_info["renewalIntervalInSecs"], lease_info["durationInSecs"]) == (3_600, 3_600)
    clock.advance(3_600_000 - 1_000)
    assert api.get(PAY_1).status_code == 200
    clock.advance(2_000)
    assert api.get(PAY_1).status_code == 404, "the lease outlived its hour"


# -------------------------------------------------------------------- names and instance ids

UNADDRESSABLE = [
    ("instanceId", "pay/1", "'/'"),
    ("instanceId", "pay 1", "U+0020"),
    ("instanceId", "pay-1 ", "U+0020"),
    ("instanceId", "pay\t1", "U+0009"),
    ("instanceId", "pay\n1", "U+000A"),
    ("instanceId", "pay\u00a01", "U+00A0"),
    ("instanceId", "pay\u00851", "U+0085"),
    ("instanceId", "..", "path segment"),
    ("app", "PAY SERVICE", "U+0020"),
]


@pytest.mark.parametrize(
    ("field", "value", "says"), UNADDRESSABLE, ids=[repr(v) for _, v, _ in UNADDRESSABLE]
)
def test_an_app_name_or_id_that_is_no_path_segment_is_refused_and_changes_nothing(
    api, node, field, value, says
):
    register(api, pay_1("10.0.0.1", last_dirty=1))
    before = registry_state(api, node)
    body = pay_1("10.0.0.2", last_dirty=1)
    body["instance"][field] = value

    response = post_registration(api, body, app=enc(body["instance"]["app"]))

    message = refusal(response, 400)
    assert f"Invalid {field}" in message and says in message, message
    assert registry_state(api, node) == before


def test_a_peer_batch_cannot_register_an_id_that_is_no_path_segment(api, node):
    items = []
    for instance_id in ("pay/1", "pay 1", "pay-2"):
        instance = instance_body(app="PAY", instance_id=instance_id)["instance"]
        items.append({"appName": "PAY", "id": instance_id, "action": "Register", "instanceInfo": instance})
    batch = json.dumps({"replicationList": items})

    response = api.post("/eureka/peerreplication/batch", data=batch, content_type="application/json")

    assert response.status_code == 200
    assert [a["statusCode"] for a in json.loads(response.content)["responseList"]] == [400, 400, 200]
    ids = [inst["instanceId"] for inst in get_json(api, "/eureka/apps/PAY")["application"]["instance"]]
    assert ids == ["pay-2"]


# ------------------------------------------------------------------------------------ limits


def test_a_new_instance_beyond_max_instances_is_503_and_changes_nothing(limits, api, node, clock):
    register(api, instance_body(app="PAY", host="10.0.0.1"))
    register(api, instance_body(app="PAY", host="10.0.0.2"))
    before = registry_state(api, node)

    response = post_registration(api, instance_body(app="PAY", host="10.0.0.3"))

    assert "maximum of 2 instances" in refusal(response, 503)
    assert registry_state(api, node) == before
    # Registered instances keep registering and renewing.
    register(api, instance_body(app="PAY", host="10.0.0.1", metadata={"release": "2"}))
    assert api.put(f"/eureka/apps/PAY/{enc('10.0.0.2:pay:8080')}").status_code == 200
    # A peer accepted its client's instance: refusing its copy would only keep the nodes apart.
    register(api, instance_body(app="PAY", host="10.0.0.3"), **REPLICATION)
    assert node.registry.reads.stats(clock.now)["instances"] == 3
    # Room again once instances leave.
    for host in ("10.0.0.1", "10.0.0.2"):
        assert api.delete(f"/eureka/apps/PAY/{enc(f'{host}:pay:8080')}").status_code == 200
    register(api, instance_body(app="PAY", host="10.0.0.4"))


def test_a_registration_with_more_metadata_than_the_limits_is_400_and_changes_nothing(limits, api, node):
    register(api, pay_1("10.0.0.1", last_dirty=1, metadata={"zone": "a"}))
    before = registry_state(api, node)

    too_many = {f"key{n}": "v" for n in range(5)}
    message = refusal(post_registration(api, pay_1("10.0.0.1", last_dirty=2, metadata=too_many)), 400)
    assert "5 keys" in message and "at most 4" in message
    too_big = {"blob": "x" * 200}
    message = refusal(post_registration(api, pay_1("10.0.0.1", last_dirty=2, metadata=too_big)), 400)
    assert "204 bytes" in message and "at most 200" in message

    assert registry_state(api, node) == before


def test_a_metadata_put_whose_merge_exceeds_the_limits_is_400_and_changes_nothing(limits, api, node):
    register(api, pay_1("10.0.0.1", last_dirty=1, metadata={"a": "1", "b": "2", "c": "3"}))
    assert api.put(f"{PAY_1}/metadata?d=4").status_code == 200
    before = registry_state(api, node)

    # Each call alone is within the limits; merged into what is there, it is over one of them.
    assert "5 keys" in refusal(api.put(f"{PAY_1}/metadata?e=5"), 400)
    assert "202 bytes" in refusal(api.put(f"{PAY_1}/metadata?a={'x' * 195}"), 400)

    assert registry_state(api, node) == before
    assert served(api)["metadata"] == {"a": "1", "b": "2", "c": "3", "d": "4"}
    # Replacing a value within the limits is still a merge like any other.
    assert api.put(f"{PAY_1}/metadata?a=one").status_code == 200
    # A peer's copy is not refused: its node accepted the call.
    assert api.put(f"{PAY_1}/metadata?e=5", **REPLICATION).status_code == 200
    assert len(served(api)["metadata"]) == 5


# ------------------------------------------------------------------------- the whole record

RECORD_LIMIT = 2_000
BIG = "x" * RECORD_LIMIT


@pytest.fixture
def record_limit(edit_config):
    """A small cap on the whole record (the metadata limits stay the defaults); request before ``api``."""
    edit_config(registry__max_instance_bytes=RECORD_LIMIT)


def amazon(**metadata: str) -> dict:
    return {"@class": AMAZON_DC_CLASS, "name": "Amazon", "metadata": {"instance-id": "pay-1", **metadata}}


# Every field the metadata limits do not see, each over the limit alone (issue 34: 913 KB records).
OVERSIZED = {
    "homePageUrl": {"homePageUrl": BIG},
    "statusPageUrl": {"statusPageUrl": BIG},
    "healthCheckUrl": {"healthCheckUrl": BIG},
    "secureHealthCheckUrl": {"secureHealthCheckUrl": BIG},
    "vipAddress": {"vipAddress": BIG},
    "secureVipAddress": {"secureVipAddress": BIG},
    "appGroupName": {"appGroupName": BIG},
    "asgName": {"asgName": BIG},
    "dataCenterInfo.metadata": {"dataCenterInfo": amazon(**{"ami-id": BIG})},
    # Several fields, each well under the limit, over it together.
    "together": {"homePageUrl": "h" * 700, "statusPageUrl": "s" * 700, "metadata": {"m": "v" * 700}},
}


def oversized(what: str, last_dirty: int = 2) -> dict:
    return pay_1("10.0.0.1", last_dirty=last_dirty, **OVERSIZED[what])


@pytest.mark.parametrize("what", OVERSIZED)
def test_a_registration_whose_record_is_over_max_instance_bytes_is_400_and_changes_nothing(
    record_limit, api, node, what
):
    register(api, pay_1("10.0.0.1", last_dirty=1))
    before = registry_state(api, node)

    message = refusal(post_registration(api, oversized(what)), 400)

    assert message.startswith("Instance record too large: "), message
    assert f"at most {RECORD_LIMIT} are allowed" in message
    assert registry_state(api, node) == before
    assert node.registry.reads.event_counts().from_clients.too_large == 1


def test_a_record_of_exactly_max_instance_bytes_registers_and_one_byte_more_does_not(record_limit, api, node):
    body = pay_1("10.0.0.1", last_dirty=1)
    size = record_bytes(decode_instance(json.dumps(body).encode(), JSON, 1, path_app="PAY"))
    body["instance"]["homePageUrl"] += "x" * (RECORD_LIMIT - size)
    register(api, body)
    assert served(api)["homePageUrl"].endswith("x")

    body["instance"]["homePageUrl"] += "x"
    body["instance"]["lastDirtyTimestamp"] = "2"
    assert f"{RECORD_LIMIT + 1} bytes" in refusal(post_registration(api, body), 400)


def test_a_metadata_put_that_would_grow_the_record_over_the_limit_is_400_and_changes_nothing(
    record_limit, api, node
):
    register(api, pay_1("10.0.0.1", last_dirty=1, homePageUrl="h" * 1_500))
    before = registry_state(api, node)

    assert "Instance record too large" in refusal(api.put(f"{PAY_1}/metadata?note={'n' * 600}"), 400)
    # A peer's metadata call is held to the record's size too.
    assert "Instance record too large" in refusal(
        api.put(f"{PAY_1}/metadata?note={'n' * 600}", **REPLICATION), 400
    )

    assert registry_state(api, node) == before
    assert api.put(f"{PAY_1}/metadata?note=short").status_code == 200


def test_a_peers_oversized_record_is_refused_and_counted_alike(record_limit, api, node):
    """A peer's record is refused for its size (with API accounts off, anyone may send the replication
    header), as a single registration and as a batch item; the other items of the batch apply."""
    register(api, pay_1("10.0.0.1", last_dirty=1))
    before = registry_state(api, node)

    assert "Instance record too large" in refusal(
        post_registration(api, oversized("vipAddress"), **REPLICATION), 400
    )
    items = [
        {
            "appName": "PAY",
            "id": "pay-1",
            "action": "Register",
            "instanceInfo": oversized("appGroupName")["instance"],
        },
        {"appName": "PAY", "id": "pay-1", "action": "Heartbeat"},
    ]
    response = api.post(
        "/eureka/peerreplication/batch",
        data=json.dumps({"replicationList": items}),
        content_type="application/json",
    )
    assert response.status_code == 200
    assert [a["statusCode"] for a in json.loads(response.content)["responseList"]] == [400, 200]

    node.cache.clear()
    assert get_json(api, PAY_1)["instance"].get("appGroupName") is None
    assert node.registry.reads.event_counts().from_peers.too_large == 2
    assert 'eureka_records_too_large_total{origin="peer"} 2.0' in api.get("/metrics").content.decode()
    assert registry_state(api, node)[0] == before[0]


def test_the_default_record_limit_leaves_room_for_a_real_registration_with_all_the_metadata_allowed(
    api, node
):
    """A Spring Cloud or Netflix client's registration holds 1-4 KB of text; with the metadata at its
    own limit (32 KiB) the record is still well under the default 64 KiB."""
    metadata = {f"key-{n:03}": "v" * 249 for n in range(128)}  # 128 keys, 32,768 bytes in all
    body = pay_1(
        "ip-10-0-0-1.eu-west-1.compute.internal",
        last_dirty=1,
        metadata=metadata,
        statusPageUrl="http://ip-10-0-0-1.eu-west-1.compute.internal:8080/actuator/info",
        healthCheckUrl="http://ip-10-0-0-1.eu-west-1.compute.internal:8080/actuator/health",
        dataCenterInfo=amazon(
            **{k: f"{k}-value-0123456789" for k in ("ami-id", "availability-zone", "local-ipv4")}
        ),
    )
    assert sum(len(k) + len(v) for k, v in metadata.items()) == node.registry.config.max_metadata_bytes
    register(api, body)
    assert len(served(api)["metadata"]) == 128
