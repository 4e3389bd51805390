"""`toolref.sending.pause.Pause`: after a 415 to an edit, an endpoint's requests go as they
are for 1 s, twice as long after each further 415, at most 30 s; an edit answered resets it."""

from __future__ import annotations

from toolref.sending.pause import Pause


def test_a_pause_doubles_with_each_415_and_resets_once_an_edit_is_answered() -> None:
    pause = Pause()
    assert pause.over(0.0)
    pause.refused(10.0, pause.begun)
    assert not pause.over(10.5)
    assert pause.over(11.0)  # a second after a first 415
    pause.refused(11.0, pause.begun)
    pause.refused(13.0, pause.begun)
    assert (pause.length, pause.over(16.9), pause.over(17.0)) == (4.0, False, True)
    for _ in range(10):
        pause.refused(20.0, pause.begun)
    assert pause.length == 30.0  # at most the longest
    pause.answered()
    pause.refused(100.0, pause.begun)
    assert pause.length == 1.0  # after an edit answered, a 415 pauses briefly again
