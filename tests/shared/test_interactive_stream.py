"""The interactive stream over a real NATS server: order, flow control, closing, gaps."""

from __future__ import annotations

import asyncio
import os

import pytest

from shared.bus.nats import NatsBus
from shared.interactive.protocol import (
    Channel,
    MalformedFrame,
    decode,
    encode,
    exit_code_of,
    exit_status,
    from_node_subject,
    open_subject,
    parse_resize,
    resize_payload,
    to_node_subject,
)
from shared.interactive.stream import WINDOW_BYTES, StreamClosed, StreamEnd

STREAM = "0123456789abcdef0123456789abcdef"


async def _pair(bus: NatsBus, window: int = WINDOW_BYTES) -> tuple[StreamEnd, StreamEnd]:
    into, out = to_node_subject("n1", STREAM), from_node_subject("n1", STREAM)
    api = StreamEnd(bus.nc, send_subject=into, recv_subject=out, window=window)
    node = StreamEnd(bus.nc, send_subject=out, recv_subject=into, window=window)
    await api.open()
    await node.open()
    return api, node


async def test_bytes_arrive_whole_and_in_order_through_a_small_window(bus: NatsBus) -> None:
    api, node = await _pair(bus, window=256 * 1024)
    payload = os.urandom(3 * 1024 * 1024 + 17)

    async def read_all() -> bytes:
        got = bytearray()
        while (frame := await api.receive()) is not None:
            channel, data = frame
            if channel == Channel.EOF:
                break
            assert channel == Channel.STDOUT
            got += data
            await asyncio.sleep(0)  # a reader slower than the writer
        return bytes(got)

    reader = asyncio.create_task(read_all())
    await node.send(Channel.STDOUT, payload)
    await node.send(Channel.EOF)
    assert await asyncio.wait_for(reader, 30) == payload
    assert node.bytes_sent == len(payload)
    await api.close()
    await node.close()


async def test_a_writer_without_credit_waits_rather_than_overrun(bus: NatsBus) -> None:
    api, node = await _pair(bus, window=128 * 1024)
    sending = asyncio.create_task(node.send(Channel.STDOUT, b"x" * (512 * 1024)))
    await asyncio.sleep(0.5)
    assert not sending.done(), "the writer went on although nobody read"
    received = 0
    while received < 512 * 1024:
        frame = await asyncio.wait_for(api.receive(), 10)
        assert frame is not None
        received += len(frame[1])
    await asyncio.wait_for(sending, 10)
    await api.close()
    await node.close()


async def test_closing_says_why_to_the_other_end_and_stops_its_writers(bus: NatsBus) -> None:
    api, node = await _pair(bus)
    await node.close("the task ended")
    assert await asyncio.wait_for(api.receive(), 5) is None
    assert api.close_reason == "the task ended"
    with pytest.raises(StreamClosed):
        await api.send(Channel.STDIN, b"ls\n")


async def test_a_gap_in_the_frames_closes_the_stream_rather_than_corrupt_it(bus: NatsBus) -> None:
    api, node = await _pair(bus)
    await bus.nc.publish(from_node_subject("n1", STREAM), encode(0, Channel.STDOUT, b"a"))
    await bus.nc.publish(from_node_subject("n1", STREAM), encode(2, Channel.STDOUT, b"c"))
    assert await asyncio.wait_for(api.receive(), 5) == (Channel.STDOUT, b"a")
    assert await asyncio.wait_for(api.receive(), 5) is None
    assert api.close_reason == "lost frames: expected frame 1, got 2"
    await node.close()


async def test_a_peer_that_ignores_the_window_is_cut_off(bus: NatsBus) -> None:
    api, node = await _pair(bus, window=64 * 1024)
    for seq in range(3):  # 96 KiB, unasked: frames published straight, no credit waited for
        frame = encode(seq, Channel.STDOUT, b"x" * 32 * 1024)
        await bus.nc.publish(from_node_subject("n1", STREAM), frame)
    await bus.nc.flush()
    await asyncio.sleep(0.3)  # all of it arrives before anything is read
    received = 0
    while (got := await asyncio.wait_for(api.receive(), 5)) is not None:
        received += len(got[1])
    assert received <= 64 * 1024
    assert api.close_reason == "the other end sent more than its window of 65536 bytes"
    await node.close()


async def test_a_silent_peer_is_noticed(bus: NatsBus) -> None:
    lonely = StreamEnd(
        bus.nc,
        send_subject=to_node_subject("n1", STREAM),
        recv_subject=from_node_subject("n1", STREAM),
        ping_s=0.1,
        dead_after_s=0.5,
    )
    await lonely.open()
    assert await asyncio.wait_for(lonely.receive(), 5) is None
    assert lonely.close_reason == "the other end went silent for 0.5 s"


def test_frames_statuses_and_resizes_round_trip_and_refuse_garbage() -> None:
    assert decode(encode(7, Channel.RESIZE, resize_payload(120, 40))) == (
        7,
        4,
        b'{"Width": 120, "Height": 40}',
    )
    assert parse_resize(resize_payload(120, 40)) == (120, 40)
    assert exit_code_of(exit_status(0)) == 0
    assert exit_code_of(exit_status(3)) == 3
    assert exit_code_of(exit_status(None, signal=9)) == 137
    with pytest.raises(MalformedFrame, match="shorter than"):
        decode(b"\x00\x00")
    with pytest.raises(MalformedFrame, match="unknown channel 99"):
        decode(encode(0, 99))
    with pytest.raises(MalformedFrame, match="Width"):
        parse_resize(b"80x24")
    with pytest.raises(ValueError, match="not a node id"):
        open_subject("a.b")
    with pytest.raises(ValueError, match="not a stream id"):
        to_node_subject("n1", "../x")
