"""Stop strings cut an answer before the first one, and no part of one is ever sent,
however the streamed pieces split it."""

from __future__ import annotations

from tunelab.inference.generate import StopStrings


def _run(stops: list[str], pieces: list[str]) -> tuple[str, bool]:
    cutter, sent = StopStrings(stops), []
    for piece in pieces:
        out, reached = cutter.feed(piece)
        sent.append(out)
        if reached:
            return "".join(sent), True
    return "".join(sent) + cutter.flush(), False


def test_the_answer_ends_before_the_stop_string_split_across_pieces():
    assert _run(["END"], ["Paris is nice E", "N", "D and more"]) == ("Paris is nice ", True)
    assert _run(["\n\n", "###"], ["a\n", "b#", "##c"]) == ("a\nb", True)


def test_text_that_only_looked_like_a_stop_string_is_sent_in_full():
    cutter = StopStrings(["END"])
    assert cutter.feed("the EN") == ("the ", False)  # "EN" could still become "END": held back
    assert cutter.feed("gine") == ("ENgine", False)
    assert _run(["END"], ["EN", "EN", "E"]) == ("ENENE", False)


def test_without_stop_strings_everything_is_sent_at_once():
    assert StopStrings([]).feed("any text") == ("any text", False)
