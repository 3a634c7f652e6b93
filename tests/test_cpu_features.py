"""The tests that force a CPU capability force only what the CPU can execute (tests/cpu_features.py): fed a CPU's
features with AVX-512 and one without, the selection runs and skips what each can and cannot run."""

from . import cpu_features
from .test_blas_core_types import CORE_TYPES

# the flags lines of two real /proc/cpuinfo files (trimmed): an AMD EPYC with AVX2 and no AVX-512, and an Intel
# Xeon with AVX-512
EPYC = ("processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge "
        "mca cmov pat pse36 clflush mmx fxsr sse sse2 ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm rep_good nopl "
        "cpuid extd_apicid tsc_known_freq pni pclmulqdq ssse3 fma cx16 sse4_1 sse4_2 x2apic movbe popcnt aes xsave "
        "avx f16c rdrand hypervisor lahf_lm cmp_legacy cr8_legacy abm sse4a misalignsse 3dnowprefetch osvw topoext "
        "fsgsbase bmi1 avx2 smep bmi2 rdseed adx smap clflushopt clwb sha_ni xsaveopt xsavec xgetbv1\n\n"
        "processor\t: 1\nflags\t\t: fpu\n")
XEON = ("processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sse sse2 ss ht "
        "syscall nx pdpe1gb rdtscp lm constant_tsc pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt "
        "aes xsave avx f16c rdrand hypervisor lahf_lm abm 3dnowprefetch fsgsbase bmi1 hle avx2 smep bmi2 erms invpcid "
        "rtm avx512f avx512dq rdseed adx smap clflushopt clwb avx512cd avx512bw avx512vl xsaveopt xsavec xgetbv1\n")


def test_a_cpu_without_avx512_runs_every_core_type_but_skylakex():
    flags = cpu_features.cpuinfo_flags(EPYC)
    assert {"avx2", "fma", "avx", "pni"} <= flags and "avx512f" not in flags
    run, skipped, distinct = cpu_features.core_types(CORE_TYPES, flags)
    assert run == ["Haswell", "Zen", "Sandybridge", "Prescott"]
    assert skipped == {"SkylakeX": "this CPU lacks avx512f"}
    assert distinct == 3  # Zen runs Haswell's kernels
    assert cpu_features.lacks(cpu_features.ATEN_NEEDS["avx512"], flags) == ["avx512f", "avx512bw", "avx512vl",
                                                                         "avx512dq"]
    assert cpu_features.lacks(cpu_features.ATEN_NEEDS["avx2"], flags) == []


def test_a_cpu_with_avx512_runs_every_core_type():
    flags = cpu_features.cpuinfo_flags(XEON)
    run, skipped, distinct = cpu_features.core_types(CORE_TYPES, flags)
    assert run == list(CORE_TYPES) and skipped == {} and distinct == 4
    # Cooperlake needs AVX512-BF16 too, which this Xeon (Skylake) lacks
    run, skipped, _ = cpu_features.core_types(("Cooperlake", "SkylakeX"), flags)
    assert run == ["SkylakeX"] and skipped == {"Cooperlake": "this CPU lacks avx512_bf16"}


def test_an_old_cpu_has_too_few_kernel_sets_to_compare():
    """SSE3 and AVX only: two kernel sets; SSE3 alone: one, which the slow test skips on (never fewer than two)."""
    _, skipped, distinct = cpu_features.core_types(CORE_TYPES, frozenset({"pni", "avx"}))
    assert distinct == 2 and set(skipped) == {"SkylakeX", "Haswell", "Zen"}
    assert skipped["Haswell"] == "this CPU lacks avx2, fma"
    assert cpu_features.core_types(CORE_TYPES, frozenset({"pni"}))[2] == 1


def test_this_cpu_has_features():
    """The features read here are this CPU's (x86-64 always has SSE2): the selection is not fed an empty set."""
    assert "sse2" in cpu_features.cpu_flags()


def test_hidden_flags_are_left_out(monkeypatch):
    """TESTS_HIDE_CPU_FLAGS hides features (patterns), so the slow test can run as on a CPU without them."""
    monkeypatch.setenv(cpu_features.HIDE, "avx512* fma")
    cpu_features.cpu_flags.cache_clear()
    try:
        flags = cpu_features.cpu_flags()
        assert not any(f.startswith("avx512") for f in flags) and "fma" not in flags and "sse2" in flags
        assert "SkylakeX" in cpu_features.core_types(("SkylakeX",))[1]
    finally:
        monkeypatch.delenv(cpu_features.HIDE)
        cpu_features.cpu_flags.cache_clear()
