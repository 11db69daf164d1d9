"""node-detacher's pure pieces: the pods' shutdown order and the Attachment's targets."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hooks.detacher import shutdown


@given(st.lists(st.tuples(st.integers(-5, 5), st.booleans()), max_size=20))
def test_shutdown_never_starts_a_lower_group_before_a_higher_one_is_gone(pods):
    refs = [shutdown.PodRef("ns", f"p{i}", prio, term) for i, (prio, term) in enumerate(pods)]
    top, group = shutdown.next_group(refs)
    if not refs:
        assert (top, group) == (None, [])
        return
    assert top == max(r.priority for r in refs)
    assert all(r.priority == top and not r.terminating for r in group)
    assert {r.key for r in group} == {r.key for r in refs if r.priority == top and not r.terminating}



def test_an_attachment_written_with_port_is_still_read():
    """Attachments written before targetPort named the port ``port``; they are read the same."""
    from hooks.detacher import targets

    spec = {"awsTargets": [{"arn": "arn:tg/a", "port": 30080}, {"arn": "arn:tg/b", "targetPort": 30080}]}
    assert targets.from_attachment_spec(spec) == [("tg", "arn:tg/a", 30080), ("tg", "arn:tg/b", 30080)]
    written = targets.to_attachment_spec(targets.from_attachment_spec(spec))
    assert all("port" not in t for t in written["awsTargets"]), "never written as port: Metacontroller keys by it"
