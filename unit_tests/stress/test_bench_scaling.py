"""The partition-scaling table's pure parts (issue 22): /proc parsing, CPU share, the rows
from two samples, the topic steps and the markdown table. The cluster run is
``test_benchmark.py``'s."""

from __future__ import annotations

import os
import threading

import pytest

from stress_tests import benchmark
from stress_tests.bench_memory import cpu_ticks, cpu_ticks_of, stat_fields, status_value
from stress_tests.bench_report import ScalingRow, render_scaling
from stress_tests.bench_scaling import BrokerSample, cpu_percent, sample, scaling_row, topic_steps

STAT = (
    "4242 (python -m broker) S 1 4242 4242 0 -1 4194560 35000 0 12 0 "
    "1500 250 0 0 20 0 37 0 1234 700000000 17000 18446744073709551615"
)
STATUS = "Name:\tpython\nState:\tS (sleeping)\nVmRSS:\t   68608 kB\nThreads:\t37\n"


def test_cpu_ticks_are_utime_plus_stime_after_the_command_name() -> None:
    fields = STAT.rsplit(")", 1)[1].split()
    assert fields[0] == "S" and cpu_ticks_of(fields) == 1500 + 250


def test_a_command_name_with_a_parenthesis_does_not_shift_the_fields() -> None:
    odd = STAT.replace("(python -m broker)", "(a) b (c)")
    assert cpu_ticks_of(odd.rsplit(")", 1)[1].split()) == 1750


def test_status_values_by_name_and_none_when_missing() -> None:
    assert status_value(STATUS, "VmRSS") == 68608
    assert status_value(STATUS, "Threads") == 37
    assert status_value("Name:\tzombie\nThreads:\t1\n", "VmRSS") is None


def test_this_process_is_sampled_and_its_cpu_time_grows() -> None:
    before = sample(os.getpid())
    assert before is not None and before.rss_mib > 0 and before.threads >= 1
    spinner = threading.Thread(target=lambda: sum(range(3_000_000)))
    spinner.start()
    spinner.join()
    after = sample(os.getpid())
    assert after is not None and after.cpu_ticks >= before.cpu_ticks
    assert stat_fields(2**22 + 1) is None and cpu_ticks(2**22 + 1) is None  # no such pid


def test_cpu_percent_is_a_share_of_one_core() -> None:
    assert cpu_percent(100, 10.0, ticks_per_s=100) == pytest.approx(10.0)
    assert cpu_percent(2000, 10.0, ticks_per_s=100) == pytest.approx(200.0)  # two cores
    with pytest.raises(ValueError):
        cpu_percent(1, 0.0)


def test_a_row_is_the_brokers_mean_over_those_sampled_at_both_ends() -> None:
    before = {
        "broker-1": BrokerSample(1000, 60.0, 10),
        "broker-2": BrokerSample(2000, 61.0, 12),
        "broker-3": BrokerSample(3000, 62.0, 14),
    }
    after = {
        "broker-1": BrokerSample(1050, 64.0, 12),
        "broker-2": BrokerSample(2150, 66.0, 12),  # broker-3 was gone at the end
    }
    row = scaling_row(30, before, after, 5.0, 6.1, ticks_per_s=100)
    assert row.partitions == 30 and row.error is None
    assert row.cpu_percent == pytest.approx((10.0 + 30.0) / 2)
    assert (row.rss_mib, row.threads, row.p50_ms) == (65.0, 12.0, 6.1)
    failed = scaling_row(3, before, {}, 5.0, None)
    assert failed.error is not None and failed.cpu_percent is None


def test_topic_steps_add_up_to_each_count() -> None:
    assert topic_steps((3, 30, 60, 100)) == [3, 27, 30, 40]
    assert topic_steps((5,)) == [5]
    for bad in ((), (0, 3), (3, 3), (30, 3), (3, 101)):
        with pytest.raises(ValueError):
            topic_steps(bad)
    assert topic_steps((3, 101), partitions_max=1000) == [3, 98]


def test_the_table_is_markdown_with_units_and_failed_rows() -> None:
    rows = [
        ScalingRow(3, 2.66, 66.4, 12.0, 4.33),
        ScalingRow(100, 54.0, 94.0, 211.0, None),
        ScalingRow(1000, error="WaitTimeoutError: no leader"),
    ]
    lines = render_scaling("title", rows).splitlines()
    assert lines[:2] == ["title", ""]
    assert (
        lines[2].startswith("| partitions | idle CPU per broker |") and lines[3] == "|---" * 5 + "|"
    )
    assert lines[4] == "| 3 | 2.7% | 66 MiB | 12 | 4.3 ms |"
    assert lines[5] == "| 100 | 54.0% | 94 MiB | 211 | - |"
    assert lines[6].startswith("| 1000 | FAILED: WaitTimeoutError: no leader |")


def test_the_scaling_options_are_parsed_and_checked(capsys: pytest.CaptureFixture[str]) -> None:
    args = benchmark.parse_args(["--only", "partition-scaling", "--scaling-partitions", "3,6"])
    assert args.scaling_partitions == (3, 6) and args.idle_window > 0
    for bad in (["--scaling-partitions", "6,3"], ["--scaling-partitions", "a"]):
        with pytest.raises(SystemExit):
            benchmark.parse_args(bad)
    with pytest.raises(SystemExit):
        benchmark.parse_args(["--idle-window", "0"])
    assert "--scaling-partitions" in capsys.readouterr().err
