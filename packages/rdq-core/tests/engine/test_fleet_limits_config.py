"""Declaring limits that hold across the fleet — in code, on a queue or a handler, and in a
TOML file — and the keys they give a task at submit: bad declarations are refused naming the
setting, a key function that fails refuses the submit naming the limit and stores nothing."""

from __future__ import annotations

import pytest

import rdq
from rdq.flow import field_value, value_key, value_of
from rdq.spi import Envelope


def tenant(task: Envelope) -> object:
    return task.payload["tenant"]


def test_queue_and_handler_limits_resolve_to_the_keys_of_their_controls() -> None:
    app = rdq.App()
    app.queue("payments", limits=[rdq.Concurrency(20, key="psp"), rdq.Rate(50, burst=5)])

    @app.handler("charge", queue="payments", limits=[rdq.Concurrency(2), rdq.Rate(10, key="psp")])
    async def charge(payload: object) -> None: ...

    @app.handler("refund", queue="payments", limits=[rdq.Concurrency(5, key=tenant, name="t")])
    async def refund(payload: object) -> None: ...

    plan = app.limit_plan("payments")
    psp = plan.exact["limit:psp"]
    assert (psp.concurrency, psp.rate, psp.sources) == (20, 10, ("queue", "handler:charge"))
    assert (plan.exact["*"].rate, plan.exact["*"].burst) == (50, 5)
    assert plan.exact["handler:charge"].concurrency == 2
    per_tenant = plan.templates["limit:t:"]
    assert per_tenant.per_value and per_tenant.concurrency == 5
    refund_task = Envelope(id="1", queue="payments", handler_ref="refund", payload={"tenant": 7})
    charge_task = Envelope(id="2", queue="payments", handler_ref="charge", payload={})
    assert plan.keys_of(refund_task) == ["limit:psp", "limit:t:7"]
    assert plan.keys_of(charge_task) == ["limit:psp"]
    assert plan.spec_of("limit:t:7") is per_tenant
    assert plan.spec_of("limit:other") is None


def test_limits_from_a_toml_table_match_the_same_limits_in_code() -> None:
    app = rdq.App()
    app.configure(
        {
            "queues": {
                "mail": {
                    "limits": [
                        {"concurrency": 20, "key": "smtp"},
                        {"rate": 50, "per": 2, "burst": 5, "handler": "send", "adaptive": False},
                        {"concurrency": 3, "name": "tenant", "value": "payload.org.id"},
                    ]
                }
            }
        }
    )
    plan = app.limit_plan("mail")
    assert plan.exact["limit:smtp"].concurrency == 20
    send = plan.exact["handler:send"]
    assert (send.rate, send.per, send.burst, send.adaptive) == (50, 2.0, 5, False)
    task = Envelope(id="1", queue="mail", handler_ref="send", payload={"org": {"id": "acme"}})
    assert plan.keys_of(task) == ["limit:smtp", "limit:tenant:acme"]
    without = Envelope(id="2", queue="mail", handler_ref="send", payload={"org": {}})
    assert plan.keys_of(without) == ["limit:smtp"], "no value: the per-value limit skips it"


@pytest.mark.parametrize(
    ("limits", "key"),
    [
        ([{"concurrency": 0}], "queues.q.limits[0].concurrency"),
        ([{"concurrency": 2, "rate": 3}], "queues.q.limits[0]"),
        ([{"rate": 5, "per": 0}], "queues.q.limits[0].per"),
        ([{"rate": 5, "burst": True}], "queues.q.limits[0].burst"),
        ([{"concurrency": 5, "per": 2.0}], "queues.q.limits[0].per"),
        ([{"concurrency": 5, "value": "payload.tenant"}], "queues.q.limits[0].name"),
        ([{"concurrency": 5, "name": "t", "value": "tenant"}], "queues.q.limits[0].value"),
        ([{"concurrency": 5, "key": "has space"}], "queues.q.limits[0].key"),
        ([{"concurrency": 5, "colour": "red"}], "queues.q.limits[0].colour"),
        ({"concurrency": 5}, "queues.q.limits"),
        ([{"concurrency": 5, "key": "x"}, {"concurrency": 6, "key": "x"}], "queues.q.limits"),
    ],
)
def test_a_bad_limit_in_a_config_file_is_refused_naming_the_setting(
    limits: object, key: str
) -> None:
    app = rdq.App()
    with pytest.raises(rdq.ConfigError) as caught:
        app.configure({"queues": {"q": {"limits": limits}}})
    assert caught.value.key == key
    assert app.limit_plan("q").empty, "nothing of a refused file applies"


def test_limits_are_refused_in_the_defaults_and_on_a_handler_of_another_handler() -> None:
    with pytest.raises(rdq.ConfigError) as caught:
        rdq.App().configure({"defaults": {"limits": [{"concurrency": 5}]}})
    assert caught.value.key == "defaults.limits"
    app = rdq.App()
    with pytest.raises(rdq.ConfigError) as other:
        app.register("a", lambda: None, limits=[rdq.Concurrency(1, handler="b")])
    assert other.value.key == "limits[0]"
    with pytest.raises(rdq.ConfigError) as unnamed:
        app.queue("q", limits=[rdq.Concurrency(1, key=tenant)])
    assert unnamed.value.key == "queues.q.limits[0].name"


def test_a_handler_whose_limit_disagrees_with_its_queue_is_refused() -> None:
    app = rdq.App()
    app.queue("q", limits=[rdq.Concurrency(5, key="psp")])
    with pytest.raises(rdq.ConfigError) as caught:
        app.register("h", lambda: None, queue="q", limits=[rdq.Concurrency(6, key="psp")])
    assert "disagree" in caught.value.message
    assert "h" not in app.handler_names


def test_more_limit_keys_than_a_task_holds_are_refused() -> None:
    app = rdq.App()
    many = [rdq.Concurrency(1, key=f"k{i}") for i in range(8)]
    with pytest.raises(rdq.ConfigError) as caught:
        app.queue("q", limits=many)
    assert caught.value.key == "queues.q.limits"


@pytest.mark.parametrize(
    ("value", "key"),
    [
        ("acme", "limit:t:acme"),
        (42, "limit:t:42"),
        ("acme corp/eu", "limit:t:acme%20corp%2Feu"),
        ("zürich", "limit:t:z%C3%BCrich"),
        ("a:b@c", "limit:t:a:b@c"),
    ],
)
def test_a_value_becomes_a_task_key_and_reads_back(value: object, key: str) -> None:
    assert value_key("t", value) == key
    assert value_of(key) == str(value)


def test_a_value_too_long_for_a_task_key_is_hashed_and_still_one_key_per_value() -> None:
    long_a, long_b = "a" * 300, "a" * 299 + "b"
    key_a, key_b = value_key("t", long_a), value_key("t", long_b)
    assert key_a != key_b and len(key_a) <= 200 and value_of(key_a).startswith("#")
    assert value_key("t", long_a) == key_a


@pytest.mark.parametrize("value", [True, 1.5, {"a": 1}, ""])
def test_a_value_that_is_not_text_or_an_integer_is_refused(value: object) -> None:
    with pytest.raises(rdq.ValidationError) as caught:
        value_key("t", value)
    assert caught.value.field == "limits.t"


def test_field_value_reads_the_payload_or_a_header() -> None:
    task = Envelope(id="1", queue="q", handler_ref="h", payload={"a": {"b": 3}}, headers={"x": "y"})
    assert field_value("payload.a.b")(task) == 3
    assert field_value("headers.x")(task) == "y"
    assert field_value("payload.a.c")(task) is None
    with pytest.raises(rdq.ConfigError):
        field_value("body.a")


@pytest.mark.asyncio
async def test_a_submit_whose_key_function_fails_is_refused_and_stores_nothing() -> None:
    app = rdq.App()
    app.queue("q", limits=[rdq.Concurrency(2, key=tenant, name="tenant")])
    app.register("h", lambda: None, queue="q")
    async with rdq.open_storage("memory://") as storage:
        client = rdq.Client(storage, app)
        with pytest.raises(rdq.ValidationError) as caught:
            await client.submit_many(
                [rdq.Submission("h", {"tenant": "a"}), rdq.Submission("h", {"no": "tenant"})]
            )
        assert caught.value.field == "limits.tenant"
        assert "KeyError" in caught.value.message
        assert (await storage.stats("q")).pending == 0
        assert await storage.list_controls("q") == [], "no record for a refused batch"
        sub = await client.submit("h", {"tenant": "acme corp"})
        task = await storage.get(sub.id)
        assert task.keys == ["limit:tenant:acme%20corp"]
        (control,) = await storage.list_controls("q")
        assert (control.key, control.concurrency) == ("limit:tenant:acme%20corp", 2)
