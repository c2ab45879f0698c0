"""The server's side of a streamed answer: token texts that are already waiting when the
event loop reads them leave as one piece (one SSE chunk), in order, and the end or an
error that follows them still arrives after them."""

from __future__ import annotations

import asyncio

import pytest

from tunelab.inference.client import Generation, InferenceFailed


async def _pieces_after(messages: list[dict]) -> tuple[list[str], Generation]:
    loop = asyncio.get_running_loop()
    generation = Generation("7", child=None, loop=loop)
    for message in messages:
        generation._deliver({"id": "7", **message})
    await asyncio.sleep(0)  # the deliveries are callbacks on the loop: let them land
    return [piece async for piece in generation.aevents()], generation


def test_waiting_tokens_leave_as_one_piece_before_the_end():
    pieces, generation = asyncio.run(_pieces_after([
        {"type": "token", "text": "Hel"}, {"type": "token", "text": "lo"}, {"type": "token", "text": ", you"},
        {"type": "done", "finish_reason": "length", "prompt_tokens": 5, "completion_tokens": 3, "timed_out": False}]))
    assert pieces == ["Hello, you"]
    assert generation.finish_reason == "length" and generation.completion_tokens == 3


def test_an_error_after_waiting_tokens_is_raised_after_their_text():
    async def read() -> list[str]:
        loop = asyncio.get_running_loop()
        generation = Generation("7", child=None, loop=loop)
        for message in ({"type": "token", "text": "a"}, {"type": "token", "text": "b"},
                        {"type": "error", "message": "the inference process ended"}):
            generation._deliver({"id": "7", **message})
        await asyncio.sleep(0)
        got = []
        with pytest.raises(InferenceFailed, match="the inference process ended"):
            async for piece in generation.aevents():
                got.append(piece)
        return got

    assert asyncio.run(read()) == ["ab"]


def test_tokens_that_come_one_at_a_time_leave_one_at_a_time():
    async def read() -> list[str]:
        loop = asyncio.get_running_loop()
        generation = Generation("7", child=None, loop=loop)

        async def feed() -> None:
            for text in ("one ", "two ", "three"):
                generation._deliver({"id": "7", "type": "token", "text": text})
                await asyncio.sleep(0.01)
            generation._deliver({"id": "7", "type": "done", "finish_reason": "stop"})

        feeder = asyncio.create_task(feed())
        got = [piece async for piece in generation.aevents()]
        await feeder
        return got

    assert asyncio.run(read()) == ["one ", "two ", "three"]
