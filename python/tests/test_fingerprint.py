from dcp_torch.fingerprint import BATCH_FINGERPRINT_VERSION, batch_fingerprint

BASE = [(0, 1024), (1, 2048), (2, 4096)]


def test_values_equal_the_cpp_pinned_values():
    # planner/client/batch_fingerprint_test.cc pins these for the C++ side.
    assert BATCH_FINGERPRINT_VERSION == 2
    assert batch_fingerprint(BASE) == 0xB23C21DAFF86F26D
    assert batch_fingerprint([]) == 0xDE9CDA4CC3D69ACE
    assert batch_fingerprint([(-1, 7)]) == 0x80DF05E64A690565
    assert batch_fingerprint([(1, 2048), (0, 1024), (2, 4096)]) == \
        0x3434CB28C2E3E3FF


def test_order_ids_and_lengths_all_matter():
    fingerprint = batch_fingerprint(BASE)
    changed = [
        [(0, 1024), (1, 2048), (3, 4096)],
        [(0, 1025), (1, 2048), (2, 4096)],
        [(1024, 0), (1, 2048), (2, 4096)],
        BASE + [(3, 0)],
    ]
    for batch in changed:
        assert batch_fingerprint(batch) not in (fingerprint, 0)
