"""Both sides of a streamed answer's pieces. The child's (`PieceSender`): the first piece
goes at once, pieces closer together than its interval go together, a slow model's go one
by one, the end sends what waits, and nothing is lost or reordered. The server's: token
texts already waiting when the event loop reads them leave as one piece (one SSE chunk),
in order, and the end or an error that follows them still arrives after them."""

from __future__ import annotations

import asyncio

import pytest

from tunelab.inference.client import Generation, InferenceFailed
from tunelab.inference.generate import PieceSender


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_fast_tokens_go_a_few_per_message_and_the_end_sends_the_rest():
    clock, sent = Clock(), []
    pieces = PieceSender(sent.append, every_s=0.02, clock=clock)
    for text in ["Hello", "", ",", " wor", "ld", "!", " Bye"]:  # a token each 5 ms ("": a word not finished)
        pieces.add(text)
        clock.now += 0.005
    pieces.flush()
    assert sent == ["Hello", ", world!", " Bye"]  # at once; then once 20 ms have gone by; the end
    assert "".join(sent) == "Hello, world! Bye"


def test_slow_tokens_go_one_by_one_and_now_sends_at_once():
    clock, sent = Clock(), []
    pieces = PieceSender(sent.append, every_s=0.02, clock=clock)
    for text in ["one", " two", " three"]:  # a token each 50 ms
        pieces.add(text)
        clock.now += 0.05
    assert sent == ["one", " two", " three"]
    pieces.add(" four")  # 50 ms after the last: at once
    pieces.add(" five")  # no time after it: waits
    assert sent[-1] == " four"
    pieces.add(" stop", now=True)  # a stop string reached, or the stream's end
    assert sent[-1] == " five stop"
    pieces.flush()
    assert len(sent) == 5  # nothing left to send


def test_empty_text_neither_sends_nor_restarts_the_interval():
    clock, sent = Clock(), []
    pieces = PieceSender(sent.append, every_s=0.02, clock=clock)
    pieces.add("")
    pieces.add("")
    assert sent == []
    pieces.add("first")  # the first text goes at once, however many "" came before
    assert sent == ["first"]


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
