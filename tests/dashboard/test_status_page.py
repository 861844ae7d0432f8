from tests.factories import instance_body


def test_status_page_lists_registered_instances_and_counts(api, node):
    api.post("/eureka/apps/ORDERS", instance_body(host="10.0.0.7"), format="json")
    page = api.get("/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "ORDERS" in html
    assert "UP - 10.0.0.7:orders:8080" in html


def test_status_page_shows_the_self_preservation_banner_only_when_expiration_is_off(api, node, clock):
    html = api.get("/").content.decode()
    assert "EMERGENCY!" in html, "a fresh node has no renewals yet: expiration is disabled"


def test_status_page_has_no_banner_when_self_preservation_is_disabled(eureka_options, clock):
    from rest_framework.test import APIClient

    from registry.node import build_node, reset_node

    eureka_options["REGISTRY"] = {**eureka_options["REGISTRY"], "enable_self_preservation": False}
    reset_node(build_node(eureka_options, clock=clock))
    try:
        assert "EMERGENCY!" not in APIClient().get("/").content.decode()
    finally:
        reset_node(None)
