"""benchmarks/cpu_speed.py: its probes time their units slice by slice, and its summary counts
the slow slices against the fastest tenth."""

from support import benchmark_module

cpu_speed = benchmark_module("cpu_speed")


def test_the_work_probe_times_the_scaling_benchmarks_user_work(cpu_speed):
    light = cpu_speed.work_slices(0.3, 0.1, 0)
    heavy = cpu_speed.work_slices(0.3, 0.1, 40)
    assert len(light) >= 2 and len(heavy) >= 2
    assert all(figure > 0 for figure in light + heavy)
    # Forty rounds of hashing an event cost several times the JSON parsing alone.
    assert min(heavy) > 2 * max(light)


def test_the_memory_probe_walks_further_for_a_larger_size(cpu_speed):
    # 64 KiB stays in the core's caches; 64 MiB does not (past any cache of this machine).
    near = cpu_speed.memory_slices(0.3, 0.1, 64)
    far = cpu_speed.memory_slices(0.3, 0.1, 64 * 1024)
    assert min(far) > 1.5 * max(near)


def test_slices_over_the_bound_are_counted_slow(cpu_speed):
    steady = [10.0] * 18
    spells = [10.0] * 14 + [12.5] * 4
    assert cpu_speed.describe(steady, "µs").endswith(" 0%")
    assert cpu_speed.describe(spells, "µs").endswith(f"{4 / 18:4.0%}")
    assert cpu_speed.describe([11.9] * 2 + [10.0] * 18, "µs").endswith(" 0%")   # under 1.2x
