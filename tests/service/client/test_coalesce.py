"""Coalesced writes: small add/extend calls queued and sent as one extend (no Ray here)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from rbdata.service.client.coalesce import CoalescedWrites


def td(rows: int | None, start: int, width: int = 3) -> TensorDict:
    """``rows`` rows (None: one element, for add) numbered from ``start``."""
    n = 1 if rows is None else rows
    obs = torch.arange(start, start + n, dtype=torch.float32).unsqueeze(-1).expand(n, width)
    out = TensorDict({"obs": obs.clone(), "next": {"step": torch.arange(start, start + n)}}, [n])
    return out[0] if rows is None else out


def test_small_writes_are_sent_in_order_as_one_extend_when_the_queue_is_full() -> None:
    queue, sent = CoalescedWrites(8), []
    assert queue.offer("add", (td(None, 0),), {}, sent.append)
    assert queue.offer("extend", (td(3, 1),), {}, sent.append)
    assert queue.offer("add", (td(None, 4),), {}, sent.append)
    assert len(queue) == 5 and sent == []
    assert queue.offer("extend", (td(3, 5),), {}, sent.append)  # 8 rows: sent
    assert len(sent) == 1 and len(queue) == 0
    assert sent[0].batch_size == torch.Size([8])
    assert sent[0]["next", "step"].tolist() == list(range(8))
    assert sent[0]["obs"][:, 2].tolist() == [float(i) for i in range(8)]


def test_the_queue_holds_copies_and_flush_sends_what_is_queued() -> None:
    queue, sent = CoalescedWrites(100), []
    data = torch.zeros(2, 4)
    queue.offer("extend", (data,), {}, sent.append)
    data.fill_(7.0)  # a collector reusing its tensor does not change what was queued
    queue.flush(sent.append)
    assert sent[0].tolist() == [[0.0] * 4] * 2
    queue.flush(sent.append)  # nothing queued: nothing sent
    assert len(sent) == 1


def test_writes_that_do_not_join_the_queue_find_it_sent_first() -> None:
    queue, sent = CoalescedWrites(4), []
    queue.offer("add", (torch.tensor([1.0, 2.0]),), {}, sent.append)
    # big (4 rows, not fewer than coalesce), keyword arguments, other kinds: not queued
    for name, args, kwargs in (
        ("extend", (torch.zeros(4, 2),), {}),
        ("extend", (torch.zeros(1, 2),), {"update_priority": False}),
        ("add", ([1, 2],), {}),
        ("add", ({"obs": torch.zeros(2)},), {}),
    ):
        queue.offer("add", (torch.tensor([3.0, 4.0]),), {}, sent.append)
        assert not queue.offer(name, args, kwargs, sent.append)
        assert len(queue) == 0
    assert [batch.shape for batch in sent] == [torch.Size([2, 2])] + [torch.Size([1, 2])] * 3


def test_a_write_of_another_structure_sends_the_queue_before_it() -> None:
    queue, sent = CoalescedWrites(100), []
    queue.offer("extend", (td(2, 0),), {}, sent.append)
    queue.offer("extend", (td(2, 2, width=5),), {}, sent.append)  # another row shape
    assert [b["obs"].shape for b in sent] == [torch.Size([2, 3])] and len(queue) == 2
    queue.offer("extend", (td(2, 4, width=5).set("extra", torch.zeros(2)),), {}, sent.append)
    queue.offer("extend", (torch.zeros(2, 5),), {}, sent.append)  # a tensor, not a TensorDict
    queue.offer("extend", (torch.zeros(2, 5, dtype=torch.int64),), {}, sent.append)  # dtype
    queue.flush(sent.append)
    kinds = [
        sorted(b.keys(True, True), key=str) if isinstance(b, TensorDict) else b.dtype for b in sent
    ]
    assert kinds == [
        [("next", "step"), "obs"],
        [("next", "step"), "obs"],
        [("next", "step"), "extra", "obs"],
        torch.float32,
        torch.int64,
    ]


def test_the_byte_bound_sends_the_queue() -> None:
    queue, sent = CoalescedWrites(1000, max_bytes=100), []
    queue.offer("extend", (torch.zeros(5, 4),), {}, sent.append)  # 80 bytes: kept
    assert sent == []
    queue.offer("extend", (torch.zeros(5, 4),), {}, sent.append)  # 160 bytes: sent
    assert len(sent) == 1 and sent[0].shape == torch.Size([10, 4])


def test_an_error_of_the_coalesced_write_is_raised_at_flush_with_a_note() -> None:
    queue = CoalescedWrites(10)

    def failing(batch: Any) -> None:
        raise KeyError("data keys do not match the storage")

    queue.offer("add", (torch.zeros(3),), {}, failing)
    queue.offer("add", (torch.zeros(3),), {}, failing)
    with pytest.raises(KeyError, match="data keys do not match") as raised:
        queue.flush(failing)
    assert "coalesced extend of 2 queued add/extend calls (2 rows)" in raised.value.__notes__[0]
    assert len(queue) == 0  # the failed writes are dropped, not sent again


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"rows": -1}, ValueError, "coalesce must be an int >= 0"),
        ({"rows": 2.0}, TypeError, "coalesce must be an int, got float"),
        ({"rows": True}, TypeError, "coalesce must be an int, got bool"),
        ({"rows": 4, "max_bytes": 0}, ValueError, "max_bytes must be an int >= 1, got 0"),
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        CoalescedWrites(**kwargs)


def test_coalesce_zero_queues_nothing() -> None:
    queue, sent = CoalescedWrites(0), []
    assert not queue.offer("add", (torch.zeros(2),), {}, sent.append)
    assert sent == []


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 12),
    writes=st.lists(st.one_of(st.none(), st.integers(0, 15)), min_size=1, max_size=30),
)
def test_every_row_is_sent_once_in_order(rows: int, writes: list[int | None]) -> None:
    """Whatever the sizes: the rows sent (queued or not) are the rows written, in order."""
    queue, sent, start = CoalescedWrites(rows), [], 0
    for size in writes:
        data = td(size, start)
        name = "add" if size is None else "extend"
        if not queue.offer(name, (data,), {}, sent.append):
            sent.append(data.unsqueeze(0) if size is None else data)  # sent by the caller
        start += 1 if size is None else size
        assert len(queue) < rows
    queue.flush(sent.append)
    steps = torch.cat([b["next", "step"] for b in sent]) if sent else torch.empty(0)
    assert steps.tolist() == list(range(start))


# ------------------------------------------------------------------- through Ray
def _ray_buffer(**options: Any) -> Any:
    from rbdata import LazyTensorStorage, TensorDictReplayBuffer

    return TensorDictReplayBuffer(
        storage=LazyTensorStorage(1000),
        service_backend="ray",
        service_backend_options={"remote_config": {"num_cpus": 0}, **options},
    )


@pytest.mark.ray
def test_small_adds_from_a_ray_task_arrive_exactly_and_in_order(ray_cluster: Any) -> None:
    ray = ray_cluster

    @ray.remote(num_cpus=0)
    def collect(client: Any, first: list[Any], then: list[Any]) -> tuple[int, list[Any]]:
        returned = [getattr(client, name)(data) for name, data in first]
        seen = len(client)  # a read of the same client sends its queue first
        returned += [getattr(client, name)(data) for name, data in then]
        client.flush()
        return seen, returned

    first = [("add", td(None, i)) for i in range(50)]
    first += [("extend", td(3, 50 + 3 * i)) for i in range(10)]
    then = [("extend", td(16, 80)), ("add", td(None, 96))]  # 16 rows: sent at once
    rb = _ray_buffer()
    try:
        seen, returned = ray.get(collect.remote(rb.client(coalesce=16), first, then))
        assert seen == 80 and returned[:60] == [None] * 60 and returned[61] is None
        assert returned[60].tolist() == list(range(80, 96))  # indices of the write sent alone
        stored = rb[torch.arange(len(rb))]
        assert len(rb) == 97 and rb.write_count == 97
        assert stored["next", "step"].tolist() == list(range(97))
        assert stored["obs"][:, 2].tolist() == [float(i) for i in range(97)]
    finally:
        rb.shutdown()


@pytest.mark.ray
def test_a_coalesced_write_that_fails_in_the_actor_raises_at_flush(ray_cluster: Any) -> None:
    rb = _ray_buffer()
    try:
        client = rb.client(coalesce=8)
        client.extend(td(2, 0))
        client.flush()
        bad = td(None, 5)
        bad["obs"] = torch.zeros(3, dtype=torch.int64)  # a dtype the storage does not hold
        client.add(bad)
        client.add(bad)
        with pytest.raises(TypeError, match="got dtype torch.int64") as raised:
            client.flush()
        assert "coalesced extend of 2 queued add/extend calls" in raised.value.__notes__[-1]
        assert len(client) == 2 and rb.write_count == 2  # nothing of the failed write stored
        with pytest.raises(ValueError, match="coalesce must be an int >= 0"):
            rb.client(coalesce=-1)
    finally:
        rb.shutdown()


@pytest.mark.ray
def test_the_buffers_own_queue_is_sent_on_close(ray_cluster: Any) -> None:
    rb = _ray_buffer(coalesce=8)
    driver, sent = rb._remote.driver, []
    send = driver._send_coalesced
    driver._send_coalesced = lambda batch: (sent.append(batch), send(batch))  # record, send
    observer = rb.client(coalesce=0)
    assert rb.client()._coalesce == 8  # the option is the clients' default
    assert [rb.add(td(None, i)) for i in range(3)] == [None] * 3
    assert len(observer) == 0  # still queued in this process
    rb.close()
    assert [batch["next", "step"].tolist() for batch in sent] == [[0, 1, 2]]
    assert not rb.is_alive
