"""The boot channel's claim reads each host's podctl/chips (said with the watcher's beat)
and podctl/state (said by the run's agent): a run that has said `done` on a host holds no
chips there, whatever the last beat said (the resume right after a run ended waited up to a
beat, 15 s, for it: benchmarks/README.md, `podctl demo`, by phase)."""

from __future__ import annotations

from podctl.jobs.channels.boot import chips_word


def test_a_run_done_on_the_host_holds_no_chips_there_though_the_last_beat_named_it():
    assert chips_word({"chips": "100 r0", "state": "r0 done 0"}) == (100, set(), set())
    assert chips_word({"chips": "100 r0", "state": "r0 done 137"}) == (100, set(), set())


def test_a_live_or_unfinished_run_still_holds_the_chips():
    assert chips_word({"chips": "100 r0", "state": "r0 running"}) == (100, {"r0"}, {"r0"})
    assert chips_word({"chips": "100 r0"}) == (100, {"r0"}, set())
    # done is said of one run only: another the beat names still holds them
    assert chips_word({"chips": "100 r0,r2", "state": "r0 done 0"}) == (100, {"r2"}, set())
    assert chips_word({"chips": "100 r2", "state": "r0 done 0"}) == (100, {"r2"}, set())
    # an agent past its script, the beat not yet said: the state alone names it
    assert chips_word({"chips": "100 -", "state": "r3 environment"}) == (100, set(), {"r3"})


def test_words_not_said_or_unknown_name_no_run():
    assert chips_word({}) == (0, set(), set())
    assert chips_word({"chips": "100 -"}) == (100, set(), set())
    assert chips_word({"chips": "100 ?"}) == (100, set(), set())
    assert chips_word({"chips": "soon r0", "state": "r0"}) == (0, {"r0"}, set())
