import gzip, json
from tests.factories import instance_body

def test_probe(api, node, clock):
    r = api.post("/eureka/apps/ORDERS", data=json.dumps(instance_body()), content_type="application/json")
    print("register", r.status_code, r.content, dict(r.headers))
    for path in ["/eureka/apps", "/eureka/apps/", "/eureka/v2/apps/", "/eureka//apps", "/eureka/v2//apps/"]:
        r = api.get(path, HTTP_ACCEPT="application/json")
        print(path, r.status_code, r.headers.get("Content-Type"), r.content[:80])
    r = api.options("/eureka/apps")
    print("OPTIONS", r.status_code, dict(r.headers), r.content[:200])
    r = api.generic("FOO", "/eureka/apps")
    print("FOO", r.status_code, dict(r.headers), r.content[:200])
    r = api.generic("HEAD", "/eureka/apps")
    print("HEAD", r.status_code, dict(r.headers), r.content[:200])
    r = api.get("/eureka/apps/ORDERS/10.0.0.1%3Aorders%3A8080")
    print("GETID", r.status_code, r.content[:300])
    r = api.get("/eureka/status")
    print("STATUS", r.status_code, r.content[:600])
    r = api.get("/eureka/status", HTTP_ACCEPT="application/json")
    print("STATUSJ", r.status_code, r.content[:600])
    r = api.get("/eureka/serverinfo/statusoverrides")
    print("SO", r.status_code, r.content[:600])
    r = api.get("/eureka/nothing")
    print("404", r.status_code, r.content[:600])
    r = api.post("/eureka/apps/X", data=b"x"*(2*1024*1024), content_type="application/json")
    print("413", r.status_code, r.content[:600])
    r = api.post("/eureka/apps/X", data=b"{}", content_type="text/plain")
    print("415", r.status_code, r.content[:600])
