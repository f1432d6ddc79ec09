"""RUN_DIR/events.jsonl: a resume is recorded as a line the report reads back."""

from rlvr.observe.events import EVENTS_FILE, read_events, record_event


def test_events_are_appended_and_read_back_by_kind(tmp_path):
    assert read_events(tmp_path) == []  # no file: no events
    record_event(tmp_path, "resume", step=4, checkpoint="step-4")
    record_event(tmp_path, "other", step=5)
    with (tmp_path / EVENTS_FILE).open("a") as f:
        f.write('{"event": "resume", "step": 7')  # a crash mid-write: skipped
    resumes = read_events(tmp_path, "resume")
    assert [(e["step"], e["checkpoint"]) for e in resumes] == [(4, "step-4")]
    assert isinstance(resumes[0]["time"], float)
    assert [e["event"] for e in read_events(tmp_path)] == ["resume", "other"]
