"""cc_test for the worker's tests that run LibTorch."""

def torch_cc_test(name, **kwargs):
    """A cc_test whose LibTorch runs one thread per process, as workers do.

    The workers of a job run with --torch-threads=1. The torch wheel's OpenMP
    pool has one thread per core: several ranks (the test's child processes)
    or other tests on a 2-core CI machine oversubscribe it, which stalls GEMMs
    for ~100 ms, collectives behind them, and breaks timing checks.

    Args:
      name: the test's name.
      **kwargs: cc_test's attributes, except env.
    """
    native.cc_test(
        name = name,
        env = {"OMP_NUM_THREADS": "1"},
        **kwargs
    )
