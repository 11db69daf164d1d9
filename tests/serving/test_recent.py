from hooks.recent import Recent


def test_the_least_recently_used_key_is_forgotten_first():
    kept = Recent(2)
    kept.put("a", 1)
    kept.put("b", 2)
    assert kept.get("a") == 1  # a is now the more recent
    kept.put("c", 3)
    assert kept.get("b") is None and kept.get("a") == 1 and kept.get("c") == 3


def test_first_is_true_once_per_key_while_it_is_kept():
    kept = Recent(2)
    assert kept.first("x") and not kept.first("x")
    assert kept.first("y") and kept.first("z")  # x forgotten
    assert kept.first("x")
