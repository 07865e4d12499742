"""The bfloat16 rewrite's CPU check, on cpuinfo texts of real CPUs.

`enable_bfloat16_graph_rewrite` warns when `/proc/cpuinfo` lists neither
`avx512_bf16` nor `amx_bf16`: TensorFlow then skips the oneDNN bfloat16
rewrite. The machine running the tests has one CPU, so the check is fed
other `/proc/cpuinfo` texts, shaped as Linux prints them, whose `flags`
lines are those of (shortened) an AMD Zen 4 (AVX512-BF16, no AMX), an Intel
Sapphire Rapids (both), an Intel Skylake-SP (AVX-512 without BF16, no AMX)
and an AMD Zen 3 (neither). The flag names are Linux's
(arch/x86/include/asm/cpufeatures.h).
"""

import os
import tempfile
import warnings

from absl.testing import absltest
from absl.testing import parameterized

import mp_optimizer
from mp_optimizer import bfloat16_rewrite

_COMMON = ("fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov "
           "pat pse36 clflush mmx fxsr sse sse2 ht syscall nx pdpe1gb rdtscp "
           "lm constant_tsc rep_good nopl xtopology cpuid pni pclmulqdq "
           "ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt aes xsave "
           "avx f16c rdrand hypervisor lahf_lm abm 3dnowprefetch fsgsbase "
           "bmi1 avx2 smep bmi2 erms invpcid avx512f avx512dq rdseed adx "
           "smap clflushopt clwb avx512cd avx512bw avx512vl xsaveopt xsavec "
           "xgetbv1 xsaves arat")
_FLAGS = {
    "zen4": _COMMON + " avx512ifma sha_ni avx512_bf16 clzero avx512vbmi "
            "umip avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni "
            "avx512_bitalg avx512_vpopcntdq rdpid fsrm",
    "sapphire_rapids": _COMMON + " avx512ifma sha_ni avx512vbmi umip pku "
                       "ospke waitpkg avx512_vbmi2 gfni vaes vpclmulqdq "
                       "avx512_vnni avx512_bitalg tme avx512_vpopcntdq "
                       "rdpid cldemote movdiri movdir64b serialize "
                       "tsxldtrk amx_bf16 avx512_fp16 amx_tile amx_int8 "
                       "avx_vnni avx512_bf16 arch_capabilities",
    "skylake_sp": _COMMON + " pku ospke md_clear arch_capabilities",
    # AVX2, no AVX-512 at all.
    "zen3": " ".join(flag for flag in _COMMON.split()
                     if not flag.startswith("avx512")) +
            " sha_ni clzero umip pku ospke vaes vpclmulqdq rdpid fsrm",
}


def _cpuinfo(flags: str, processors: int = 2) -> str:
  """A `/proc/cpuinfo` text: one block per processor, as Linux prints it."""
  return "\n".join(
      f"processor\t: {n}\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n"
      f"model name\t: Test CPU\nfpu\t\t: yes\ncpuid level\t: 28\n"
      f"flags\t\t: {flags}\nvmx flags\t: vnmi preemption_timer "
      f"invvpid ept_x_only\nbugs\t\t: spectre_v1 spectre_v2\n"
      f"bogomips\t: 5192.28\npower management:\n"
      for n in range(processors))


def _warnings_of(cpuinfo_text: str, source: str = "/proc/cpuinfo"):
  """The warnings `warn_unless_bfloat16_cpu` gives for `cpuinfo_text`."""
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    bfloat16_rewrite.warn_unless_bfloat16_cpu(cpuinfo_text, source)
  return caught


class Bfloat16CpuCheckTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("zen4_avx512_bf16", "zen4", {"avx512_bf16"}),
      ("sapphire_rapids_both", "sapphire_rapids",
       {"avx512_bf16", "amx_bf16"}),
      ("skylake_sp_neither", "skylake_sp", set()),
  )
  def test_flags_read_from_a_cpuinfo_file(self, cpu, expected):
    with tempfile.TemporaryDirectory() as folder:
      path = os.path.join(folder, "cpuinfo")
      with open(path, "w") as file:
        file.write(_cpuinfo(_FLAGS[cpu]))
      self.assertEqual(mp_optimizer.bfloat16_cpu_flags(path), expected)

  def test_no_cpuinfo_file_means_nothing_is_known(self):
    with tempfile.TemporaryDirectory() as folder:
      self.assertIsNone(mp_optimizer.bfloat16_cpu_flags(
          os.path.join(folder, "cpuinfo")))

  @parameterized.named_parameters(
      ("zen4", "zen4"),
      ("sapphire_rapids", "sapphire_rapids"),
  )
  def test_a_cpu_with_a_bfloat16_flag_gets_no_warning(self, cpu):
    self.assertEqual(_warnings_of(_cpuinfo(_FLAGS[cpu])), [])

  @parameterized.named_parameters(
      ("skylake_sp", "skylake_sp"),
      ("zen3", "zen3"),
  )
  def test_a_cpu_without_either_flag_gets_one_warning(self, cpu):
    caught = _warnings_of(_cpuinfo(_FLAGS[cpu]))
    self.assertLen(caught, 1)
    self.assertIs(caught[0].category, UserWarning)
    self.assertIn("computes in float32", str(caught[0].message))

  def test_the_warning_names_the_flags_that_silence_it_and_the_source(self):
    source = "/tmp/another/cpuinfo"
    caught = _warnings_of(_cpuinfo(_FLAGS["skylake_sp"]), source)
    message = str(caught[0].message)
    self.assertIn(f"in {source})", message)
    for named, cpu_name in (("avx512_bf16", "AVX512-BF16"),
                            ("amx_bf16", "AMX")):
      with self.subTest(flag=named):
        self.assertIn(named, message)
        self.assertIn(cpu_name, message)
        # The flag the warning names is the one whose presence silences it.
        self.assertEqual(_warnings_of(
            _cpuinfo(_FLAGS["skylake_sp"] + " " + named), source), [])

  def test_the_warning_points_at_the_callers_line(self):
    caught = _warnings_of(_cpuinfo(_FLAGS["skylake_sp"]))
    self.assertEqual(caught[0].filename, __file__)


if __name__ == "__main__":
  absltest.main()
