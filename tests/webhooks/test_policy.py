"""The plain rules of webhooks: matching, payload, signature, answers and the retry schedule."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from registry.domain.changes import CANCELLED, EVICTED, REGISTERED, STATUS_CHANGED, Change
from registry.webhooks import policy
from registry.webhooks.policy import Target, Verdict


def change(app="ORDERS", action=REGISTERED, replicated=False, id=1) -> Change:
    return Change(id, 1_796_000_000_000, app, "10.0.0.1:orders:8080", action, None, "UP", None, replicated)


def test_a_subscription_without_filters_matches_every_change_made_here():
    everything = Target(1, "all")
    assert all(everything.matches(change(action=action)) for action in (REGISTERED, CANCELLED, EVICTED))
    assert everything.matches(change(app="billing"))


def test_the_apps_filter_compares_names_case_insensitively():
    target = Target(1, "orders", apps=policy.parse_apps(" orders , Billing,"))
    assert target.apps == {"ORDERS", "BILLING"}
    assert target.matches(change(app="ORDERS")) and target.matches(change(app="billing"))
    assert not target.matches(change(app="PAYMENTS"))


def test_the_actions_filter_keeps_only_the_actions_named():
    target = Target(1, "gone", actions=policy.parse_actions("cancelled,EVICTED"))
    assert target.matches(change(action=CANCELLED)) and target.matches(change(action=EVICTED))
    assert not target.matches(change(action=REGISTERED))
    assert not target.matches(change(action=STATUS_CHANGED))


def test_both_filters_must_match():
    target = Target(1, "x", apps=frozenset({"ORDERS"}), actions=frozenset({CANCELLED}))
    assert target.matches(change(app="orders", action=CANCELLED))
    assert not target.matches(change(app="orders", action=REGISTERED))
    assert not target.matches(change(app="billing", action=CANCELLED))


def test_an_unknown_action_is_refused_with_its_name():
    with pytest.raises(policy.BadFilter, match="DELETED"):
        policy.parse_actions("REGISTERED, DELETED")


def test_replicated_changes_are_sent_only_to_subscriptions_that_ask_for_them():
    from_peer = change(replicated=True)
    assert not Target(1, "x").matches(from_peer)
    assert Target(1, "x", include_replicated=True).matches(from_peer)


def test_matching_pairs_each_change_with_each_subscription_it_matches_in_change_order():
    orders, cancels = (
        Target(1, "orders", apps=frozenset({"ORDERS"})),
        Target(2, "c", actions=frozenset({CANCELLED})),
    )
    changes = [change(id=1), change(app="B", action=CANCELLED, id=2), change(action=CANCELLED, id=3)]
    pairs = [(target.name, c.id) for target, c in policy.matching([orders, cancels], changes)]
    assert pairs == [("orders", 1), ("c", 2), ("orders", 3), ("c", 3)]


def test_the_payload_has_the_documented_keys():
    body = policy.payload(
        Change(7, 123, "ORDERS", "i-1", STATUS_CHANGED, "UP", "OUT_OF_SERVICE", "OUT_OF_SERVICE", True), "ops"
    )
    assert body == {
        "id": 7,
        "timestamp": 123,
        "app": "ORDERS",
        "instanceId": "i-1",
        "action": STATUS_CHANGED,
        "oldStatus": "UP",
        "newStatus": "OUT_OF_SERVICE",
        "overriddenStatus": "OUT_OF_SERVICE",
        "replicated": True,
        "subscription": "ops",
    }


def test_the_signature_is_hmac_sha256_of_timestamp_dot_body_with_the_secret():
    body = policy.encode(policy.payload(change(), "ops"))
    expected = hmac.new(b"s3cret", b"1796000000." + body, hashlib.sha256).hexdigest()
    assert policy.signature("s3cret", 1_796_000_000, body) == f"sha256={expected}"
    # Any change of secret, time or body gives another signature.
    assert policy.signature("other", 1_796_000_000, body) != f"sha256={expected}"
    assert policy.signature("s3cret", 1_796_000_001, body) != f"sha256={expected}"
    assert policy.signature("s3cret", 1_796_000_000, body + b" ") != f"sha256={expected}"


def test_the_headers_name_the_event_the_delivery_and_carry_the_signed_timestamp():
    body = b'{"a":1}'
    headers = policy.headers("k", 1_796_000_000, body, CANCELLED, 42)
    assert headers["Content-Type"] == "application/json"
    assert headers["X-Eureka-Event"] == CANCELLED
    assert headers["X-Eureka-Delivery"] == "42"
    assert headers["X-Eureka-Timestamp"] == "1796000000"
    mac = hmac.new(b"k", b"1796000000." + body, hashlib.sha256).hexdigest()
    assert headers["X-Eureka-Signature"] == f"sha256={mac}"


@pytest.mark.parametrize(
    "status, verdict",
    [
        (200, Verdict.DELIVERED),
        (202, Verdict.DELIVERED),
        (204, Verdict.DELIVERED),
        (None, Verdict.RETRY),  # timeout, refused connection
        (408, Verdict.RETRY),
        (429, Verdict.RETRY),
        (500, Verdict.RETRY),
        (502, Verdict.RETRY),
        (503, Verdict.RETRY),
        (400, Verdict.FAILED),
        (401, Verdict.FAILED),
        (404, Verdict.FAILED),
        (410, Verdict.FAILED),
        (301, Verdict.FAILED),  # redirects are not followed
    ],
)
def test_answers_are_classified(status, verdict):
    assert policy.classify(status) is verdict


def test_the_retry_delay_doubles_from_the_base_up_to_the_cap():
    delays = [policy.retry_delay_ms(attempt, 1_000, 30_000) for attempt in range(1, 9)]
    assert delays == [1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000]
    assert policy.retry_delay_ms(10_000, 1_000, 30_000) == 30_000


def test_a_retryable_answer_fails_the_delivery_once_attempts_are_used_up():
    assert policy.next_step(Verdict.RETRY, 7, 8) is Verdict.RETRY
    assert policy.next_step(Verdict.RETRY, 8, 8) is Verdict.FAILED
    assert policy.next_step(Verdict.DELIVERED, 8, 8) is Verdict.DELIVERED
    assert policy.next_step(Verdict.FAILED, 1, 8) is Verdict.FAILED


@pytest.mark.parametrize(
    "url",
    [
        "http://hooks.example.com/eureka",
        "https://10.0.0.5:8443/x?y=1",
        "http://[::1]:9000/",
        "http://webhook-receiver:8080/hook",  # a Compose service name: one label, no dot
    ],
)
def test_http_and_https_urls_are_accepted(url):
    assert policy.check_url(url) == url


@pytest.mark.parametrize(
    "url, reason",
    [
        ("ftp://example.com/x", "http:// or https://"),
        ("javascript:alert(1)", "http:// or https://"),
        ("example.com/hook", "http:// or https://"),
        ("http:///path", "no host"),
        ("http://user:pw@example.com/", "credentials"),
        ("http://example.com:99999/", "not a valid URL"),
        ("http://example.com/a b", "white space"),
    ],
)
def test_other_urls_are_refused_with_the_reason(url, reason):
    with pytest.raises(policy.BadFilter, match=reason):
        policy.check_url(url)


def test_errors_kept_in_the_log_are_one_bounded_line():
    assert policy.short_error("a\n  b\tc") == "a b c"
    assert len(policy.short_error("x" * 1000)) == 200


def test_the_prune_job_is_a_no_op_on_a_node_without_webhooks(node, clock):
    # No database access (this module has no django_db mark): tests' and commands' nodes run no relay.
    assert node.run_job("prune_webhook_deliveries", clock.now, "scheduler") is None
