"""GET /api/v1/changes and the stream view's answers, on a node with a fake clock."""

from __future__ import annotations

import base64
import json

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import override_settings

from registry.access import accounts
from registry.access.credentials import CredentialCache
from registry.domain.changes import IDS_PER_MS
from tests.conftest import START_MS, FakeClock
from tests.factories import instance_body

CHANGES = "/api/v1/changes"
STREAM = "/api/v1/changes/stream"


def register(api, app="ORDERS", instance_id="o-1", **creds):
    body = json.dumps(instance_body(app=app, instance_id=instance_id)).encode()
    response = api.post(f"/eureka/apps/{app}", data=body, content_type="application/json", **creds)
    assert response.status_code == 204, response.content
    return response


def changes(api, query="", **headers):
    response = api.get(f"{CHANGES}{query}", **headers)
    assert response["Content-Type"] == "application/json", response.content
    return response.status_code, json.loads(response.content)


def seen(body) -> list[tuple[str, str, str]]:
    return [(c["action"], c["app"], c["instanceId"]) for c in body["changes"]]


@pytest.fixture
def fleet(api, node, clock):
    """ORDERS o-1, o-2 and BILLING b-1 registered; o-1 taken OUT_OF_SERVICE; o-2 cancelled."""
    register(api, "ORDERS", "o-1")
    register(api, "ORDERS", "o-2")
    register(api, "BILLING", "b-1")
    clock.advance(1_000)
    assert api.put("/eureka/apps/ORDERS/o-1/status?value=OUT_OF_SERVICE").status_code == 200
    assert api.delete("/eureka/apps/ORDERS/o-2").status_code == 200
    return node


def test_without_since_every_kept_change_comes_in_order_with_its_fields(api, fleet):
    status, body = changes(api)
    assert status == 200
    assert seen(body) == [
        ("REGISTERED", "ORDERS", "o-1"),
        ("REGISTERED", "ORDERS", "o-2"),
        ("REGISTERED", "BILLING", "b-1"),
        ("STATUS_CHANGED", "ORDERS", "o-1"),
        ("CANCELLED", "ORDERS", "o-2"),
    ]
    ids = [c["id"] for c in body["changes"]]
    assert ids == sorted(ids) and len(set(ids)) == 5
    assert ids[0] == START_MS * IDS_PER_MS + 1
    override = body["changes"][3]
    assert override == {
        "id": ids[3],
        "timestamp": START_MS + 1_000,
        "app": "ORDERS",
        "instanceId": "o-1",
        "action": "STATUS_CHANGED",
        "oldStatus": "UP",
        "newStatus": "OUT_OF_SERVICE",
        "overriddenStatus": "OUT_OF_SERVICE",
        "replicated": False,
    }
    assert body["changes"][4]["newStatus"] is None
    assert (body["lastId"], body["oldestId"], body["next"]) == (ids[-1], ids[0], ids[-1])


def test_since_returns_only_later_changes_and_next_follows_on_without_gaps(api, fleet):
    _, everything = changes(api)
    ids = [c["id"] for c in everything["changes"]]
    _, page = changes(api, f"?since={ids[1]}&limit=2")
    assert [c["id"] for c in page["changes"]] == ids[2:4]
    assert page["next"] == ids[3]
    _, rest = changes(api, f"?since={page['next']}&limit=2")
    assert [c["id"] for c in rest["changes"]] == ids[4:]
    _, nothing = changes(api, f"?since={rest['next']}")
    assert nothing["changes"] == [] and nothing["next"] == ids[-1]


def test_the_last_event_id_header_is_a_resume_point_too(api, fleet):
    _, everything = changes(api)
    ids = [c["id"] for c in everything["changes"]]
    _, page = changes(api, "?since=0", HTTP_LAST_EVENT_ID=str(ids[3]))
    assert [c["id"] for c in page["changes"]] == ids[4:]


def test_app_and_action_filters_and_next_skips_what_they_leave_out(api, fleet):
    _, orders = changes(api, "?app=orders")
    assert {c["app"] for c in orders["changes"]} == {"ORDERS"} and len(orders["changes"]) == 4
    _, billing = changes(api, "?app=Billing,nothing")
    assert seen(billing) == [("REGISTERED", "BILLING", "b-1")]
    # The page was not full: next is the newest id, not b-1's, so the reader skips the rest.
    assert billing["next"] == billing["lastId"]
    _, status = changes(api, "?action=status_changed,CANCELLED")
    assert seen(status) == [("STATUS_CHANGED", "ORDERS", "o-1"), ("CANCELLED", "ORDERS", "o-2")]
    _, both = changes(api, "?app=ORDERS&action=REGISTERED&limit=1")
    assert seen(both) == [("REGISTERED", "ORDERS", "o-1")]
    assert both["next"] == both["changes"][0]["id"]  # a full page: next is its last change


@pytest.mark.parametrize(
    ("query", "parameter"),
    [("?since=x", "since"), ("?limit=5001", "limit"), ("?action=RENEW", "action"), ("?app=", "app")],
)
def test_bad_parameters_get_400_naming_the_parameter(api, node, query, parameter):
    status, body = changes(api, query)
    assert status == 400
    assert body["error"] == "bad_parameter" and body["parameter"] == parameter
    assert body["detail"].startswith(f"{parameter}:")
    response = api.get(STREAM + query)
    assert response.status_code == 400 and json.loads(response.content)["parameter"] == parameter


def test_a_bad_last_event_id_gets_400(api, node):
    status, body = changes(api, HTTP_LAST_EVENT_ID="yesterday")
    assert status == 400 and body["parameter"] == "Last-Event-ID"


def test_an_id_whose_successors_left_the_retention_window_gets_410_with_the_newest_id(api, fleet, clock):
    _, before = changes(api)
    first = before["changes"][0]["id"]
    assert changes(api, f"?since={first}")[0] == 200
    clock.advance(fleet.registry.config.delta_retention_ms + 1)
    fleet.run_job("prune_delta_queue", clock(), "test")
    register(api, "ORDERS", "o-3")
    status, body = changes(api, f"?since={first}")
    assert status == 410
    assert body == {
        "error": "too_old",
        "detail": "refetch GET /eureka/apps, then follow from lastId",
        "lastId": body["lastId"],
    }
    _, now = changes(api)
    assert body["lastId"] == now["lastId"]
    assert seen(now) == [("REGISTERED", "ORDERS", "o-3")]
    # The newest id is a good resume point.
    assert changes(api, f"?since={body['lastId']}")[1]["changes"] == []


def test_an_id_ahead_of_this_nodes_numbering_gets_410_too(api, fleet):
    _, body = changes(api)
    status, ahead = changes(api, f"?since={body['lastId'] + 1_000}")
    assert (status, ahead["error"], ahead["lastId"]) == (410, "too_old", body["lastId"])


def test_an_empty_log_answers_an_empty_page_with_next_at_the_start(api, node):
    _, body = changes(api)
    assert body == {
        "changes": [],
        "lastId": START_MS * IDS_PER_MS,
        "oldestId": None,
        "next": START_MS * IDS_PER_MS,
    }


def test_the_feed_switched_off_answers_404(eureka_options, clock, api):
    from registry.runtime.composition import build_node
    from registry.runtime.process import reset_node

    reset_node(build_node(eureka_options.with_changes(change_feed__enabled=False), clock=clock))
    try:
        for path in (CHANGES, STREAM):
            response = api.get(path)
            assert response.status_code == 404
            assert json.loads(response.content)["error"] == "not_found"
    finally:
        reset_node(None)


def test_other_methods_get_405(api, node):
    response = api.post(CHANGES)
    assert response.status_code == 405 and response["Allow"] == "GET, HEAD"
    assert api.head(CHANGES).status_code == 200
    response = api.head(STREAM)
    assert response.status_code == 405 and response["Allow"] == "GET"
    assert node.change_streams is None, "no stream was opened"


def test_the_console_may_not_take_the_feeds_path():
    from registry.config.site import dashboard_prefix
    from registry.domain.config import BadSetting

    with pytest.raises(BadSetting, match="EUREKA_DASHBOARD_PATH"):
        dashboard_prefix("/api")


# ---------------------------------------------------------------------------- the stream view


@pytest.fixture
def short_streams(edit_config):
    """Streams that end after a second, so that a test can read a whole one; request before ``node``."""
    edit_config(change_feed__stream_max_seconds=1, change_feed__keepalive_seconds=1)


@pytest.fixture
def one_stream(edit_config):
    """Room for one open stream on the node; request before ``node``."""
    edit_config(change_feed__streams_max=1)


@pytest.fixture
def two_streams_per_address(edit_config):
    """Ten open streams on the node, two from one address; request before ``node``."""
    edit_config(change_feed__streams_max=10, change_feed__streams_per_address_max=2)


def read_stream(response) -> str:
    return b"".join(response.streaming_content).decode()


def test_a_stream_answers_with_event_stream_headers_and_resumes_after_the_given_id(short_streams, api, fleet):
    _, body = changes(api)
    ids = [c["id"] for c in body["changes"]]
    response = api.get(f"{STREAM}?app=orders", HTTP_LAST_EVENT_ID=str(ids[1]))
    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream"
    assert response["Cache-Control"] == "no-cache"
    assert response["X-Accel-Buffering"] == "no"
    text = read_stream(response)
    events = [block for block in text.split("\n\n") if block.startswith("id:")]
    assert [int(e.split("\n")[0][4:]) for e in events] == [ids[3], ids[4]]
    assert events[0].split("\n")[1] == "event: change"
    assert json.loads(events[0].split("\n")[2][6:])["action"] == "STATUS_CHANGED"
    assert fleet.change_streams.open_streams == 0


def test_a_stream_without_resume_point_sends_only_future_changes(short_streams, api, fleet):
    text = read_stream(api.get(STREAM))
    assert "event: change" not in text and text.startswith("retry: ")


def test_a_stream_from_a_too_old_id_says_so_once_then_continues_from_the_newest(
    short_streams, api, fleet, clock
):
    first = changes(api)[1]["changes"][0]["id"]
    clock.advance(fleet.registry.config.delta_retention_ms + 1)
    fleet.run_job("prune_delta_queue", clock(), "test")
    last_id = changes(api)[1]["lastId"]
    text = read_stream(api.get(f"{STREAM}?since={first}"))
    assert text.count("event: too-old") == 1
    block = text[text.index(f"id: {last_id}\nevent: too-old") :].split("\n\n")[0]
    assert json.loads(block.split("data: ")[1]) == {"lastId": last_id, "refetch": "/eureka/apps"}


def test_streams_above_the_maximum_get_503_with_retry_after(one_stream, api, node):
    from registry.protocol.feed_views import stream_hub

    hub = stream_hub(node)
    held = hub.open()
    response = api.get(STREAM)
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert json.loads(response.content)["error"] == "too_many_streams"
    hub.release(held)


@pytest.mark.django_db  # closing a response sends request_finished, whose receivers may use the database
def test_streams_beyond_an_addresss_share_get_429_and_other_addresses_still_get_theirs(
    two_streams_per_address, api, node
):
    from registry.protocol.feed_views import stream_hub

    hub = stream_hub(node)
    held = [hub.open("203.0.113.66"), hub.open("127.0.0.1")]
    # Behind a trusted proxy (loopback, by default) the forwarded address is the one counted.
    behind_proxy = {"REMOTE_ADDR": "127.0.0.1", "HTTP_X_FORWARDED_FOR": "203.0.113.66"}
    first = api.get(STREAM, **behind_proxy)
    assert first.status_code == 200

    refused = api.get(STREAM, **behind_proxy)
    assert refused.status_code == 429
    assert refused["Retry-After"] == "5"
    body = json.loads(refused.content)
    assert body["error"] == "too_many_streams_from_address"
    assert body["detail"].startswith("2 change streams are open from 203.0.113.66")
    assert hub.refused_per_address == 1
    neighbour = api.get(STREAM, REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.77")
    assert neighbour.status_code == 200
    assert api.get(STREAM, REMOTE_ADDR="198.51.100.7").status_code == 200
    assert "eureka_change_streams_refused_per_address_total 1.0" in api.get("/metrics").content.decode()
    # A stream that ends gives its address the slot back.
    first.close()
    assert api.get(STREAM, **behind_proxy).status_code == 200
    for subscription in held:
        hub.release(subscription)


@pytest.mark.django_db  # closing a response sends request_finished, whose receivers may use the database
def test_a_stream_never_read_frees_its_slot_when_closed(short_streams, api, node):
    response = api.get(STREAM)
    assert node.change_streams.open_streams == 1
    response.close()
    assert node.change_streams.open_streams == 0


# ----------------------------------------------------------------------------------- access

FAST_HASHER = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def auth_on():
    accounts.reset_credential_cache(CredentialCache(FakeClock(0), recheck_ms=5_000, refused_ms=2_000))
    with override_settings(
        EUREKA=settings.EUREKA.with_changes(access__api_auth=True), PASSWORD_HASHERS=FAST_HASHER
    ):
        yield
    accounts.reset_credential_cache(None)


def basic(name: str, role: str | None) -> dict[str, str]:
    user = get_user_model().objects.create_user(name, password="pw")
    if role:
        user.groups.add(Group.objects.get(name=f"eureka-{role}"))
    return {"HTTP_AUTHORIZATION": "Basic " + base64.b64encode(f"{name}:pw".encode()).decode()}


@pytest.mark.django_db
@pytest.mark.usefixtures("auth_on")
def test_with_api_accounts_on_the_feed_needs_the_reader_role_or_more(short_streams, api, node):
    response = api.get(CHANGES)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith('Basic realm="eureka"')
    assert json.loads(response.content)["error"] == "unauthenticated"
    wrong = {"HTTP_AUTHORIZATION": "Basic " + base64.b64encode(b"nobody:pw").decode()}
    assert api.get(CHANGES, **wrong).status_code == 401
    assert api.get(STREAM).status_code == 401
    no_role = basic("norole", None)
    assert api.get(CHANGES, **no_role).status_code == 403
    assert json.loads(api.get(STREAM, **no_role).content)["error"] == "forbidden"
    for role in ("reader", "client", "peer"):
        creds = basic(f"a-{role}", role)
        assert api.get(CHANGES, **creds).status_code == 200, role
        response = api.get(STREAM, **creds)
        assert response.status_code == 200, role
        response.close()


def test_with_api_accounts_off_the_feed_is_open(api, node):
    assert api.get(CHANGES).status_code == 200


def test_metrics_count_open_and_refused_streams(one_stream, api, node):
    from registry.protocol.feed_views import stream_hub

    held = stream_hub(node).open()
    assert api.get(STREAM).status_code == 503
    text = api.get("/metrics").content.decode()
    assert "eureka_change_streams_open 1.0" in text
    assert "eureka_change_streams_refused_total 1.0" in text
    stream_hub(node).release(held)


# --------------------------------------------------------------- what a follower reads (manage.py mesh)


def test_with_instances_each_change_carries_the_instance_as_the_map_holds_it_now(api, fleet):
    status, body = changes(api, "?instances=true")
    assert status == 200
    by_action = {(c["action"], c["instanceId"]): c for c in body["changes"]}
    registered = by_action[("REGISTERED", "o-1")]["instance"]
    # The instance now, not as it was at the change: o-1 was taken OUT_OF_SERVICE since.
    assert registered["instanceId"] == "o-1" and registered["app"] == "ORDERS"
    assert registered["status"] == "OUT_OF_SERVICE"
    assert registered["ipAddr"] and registered["port"]["$"]
    assert by_action[("CANCELLED", "o-2")]["instance"] is None
    assert by_action[("REGISTERED", "o-2")]["instance"] is None
    # Without the switch the changes are as before.
    assert "instance" not in changes(api)[1]["changes"][0]


def test_a_stream_with_instances_carries_them_too(short_streams, api, fleet):
    first = changes(api)[1]["changes"][0]["id"]
    text = read_stream(api.get(f"{STREAM}?since={first}&instances=true&app=billing"))
    data = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
    assert [(c["action"], c["instance"]["instanceId"]) for c in data] == [("REGISTERED", "b-1")]


def test_instances_must_be_true_or_false(api, node):
    status, body = changes(api, "?instances=yes")
    assert status == 400
    assert body["parameter"] == "instances"


def test_the_registry_page_is_the_map_now_with_the_change_to_follow_on_from(api, fleet):
    response = api.get("/api/v1/registry")
    assert response.status_code == 200
    body = json.loads(response.content)
    assert body["lastId"] == changes(api)[1]["lastId"]
    apps = {app["name"]: app["instance"] for app in body["applications"]["application"]}
    assert sorted(apps) == ["BILLING", "ORDERS"]
    assert [(i["instanceId"], i["status"]) for i in apps["ORDERS"]] == [("o-1", "OUT_OF_SERVICE")]
    # A registration after it comes after lastId in the feed.
    register(api, "ORDERS", "o-3")
    later = changes(api, f"?since={body['lastId']}")[1]
    assert seen(later) == [("REGISTERED", "ORDERS", "o-3")]


def test_the_registry_page_needs_the_reader_role_with_api_accounts_on(api, node):
    with override_settings(EUREKA=settings.EUREKA.with_changes(access__api_auth=True)):
        assert api.get("/api/v1/registry").status_code == 401
