"""benchmarks/profile_default.py's ledger: a call is counted once, in the outermost category it runs in."""

from tests.benchmarks.scripts import load_benchmark


class Clock:
    """A perf_counter that advances only when a test says so."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_nested_calls_count_once_in_the_outermost_category(monkeypatch):
    profile = load_benchmark("profile_default")
    clock = Clock()
    monkeypatch.setattr(profile.time, "perf_counter", clock)
    ledger = profile.Ledger()

    def work():
        clock.now += 1.0

    forward = ledger.timed("forward", work)

    def generate():
        work()
        for _ in range(3):
            forward()  # inside generation: generation's time, not forward's

    ledger.timed("generation", generate)()
    forward()
    assert dict(ledger.seconds) == {"generation": 4.0, "forward": 1.0} and ledger.active is None


def test_patching_twice_wraps_once():
    profile = load_benchmark("profile_default")
    ledger = profile.Ledger()

    class Model:
        def forward(self):
            return 1

    profile.patch(ledger, Model, "forward", "forward")
    first = Model.forward
    profile.patch(ledger, Model, "forward", "forward")
    assert Model.forward is first and Model().forward() == 1 and ledger.seconds["forward"] > 0
