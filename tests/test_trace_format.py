"""The uftrace-replay-style text graph.  Expected texts are written by hand from the layout
and the examples of uftrace-replay(1) (the `abc` program: main → a → b → c, and its -F b,
-N b and -D 3 outputs), with our duration column (guest instructions, 18 wide)."""

from __future__ import annotations

from emutrace.trace.events import Entry, Exit, Record
from emutrace.trace.format import HEADER, ReplayOptions, format_value, replay_text

NAMES = {1: "__cxa_atexit", 2: "main", 3: "a", 4: "b", 5: "c", 6: "_start",
         7: "__libc_start_main", 8: "exit", 10: "fact", 11: "compare_ints",
         12: "scenario_qsort", 13: "qsort", 14: "msort", 15: "exit_outer", 16: "exit_inner"}


def sym(addr: int) -> str:
    return NAMES[addr]


def abc() -> list[Record]:
    """uftrace-replay(1)'s abc: __cxa_atexit(), then main → a → b → c."""
    return [
        Entry(0, 0, 1), Exit(138, 0, 1, None, 138),
        Entry(200, 0, 2), Entry(210, 1, 3), Entry(220, 2, 4), Entry(225, 3, 5),
        Exit(229, 3, 5, None, 4), Exit(231, 2, 4, None, 11), Exit(240, 1, 3, None, 30),
        Exit(250, 0, 2, None, 50),
    ]


def test_full_graph_layout() -> None:
    text = replay_text(abc(), sym, ReplayOptions(start=None))
    assert text == (
        "# DURATION [insns]   FUNCTION\n"
        "               138 | __cxa_atexit();\n"
        "                   | main() {\n"
        "                   |   a() {\n"
        "                   |     b() {\n"
        "                 4 |       c();\n"
        "                11 |     } /* b */\n"
        "                30 |   } /* a */\n"
        "                50 | } /* main */\n"
    )
    assert HEADER.index("FUNCTION") == text.splitlines()[1].index("|") + 2


def col(dur: int | str, text: str) -> str:
    return f"{dur:>18} | {text}"


def body(text: str) -> list[str]:
    return text.splitlines()[1:]


def test_start_defaults_to_main() -> None:
    assert body(replay_text(abc(), sym)) == [
        col("", "main() {"), col("", "  a() {"), col("", "    b() {"), col(4, "      c();"),
        col(11, "    } /* b */"), col(30, "  } /* a */"), col(50, "} /* main */")]


def test_filter_F_b() -> None:
    assert body(replay_text(abc(), sym, ReplayOptions(filters=("b",)))) == [
        col("", "b() {"), col(4, "  c();"), col(11, "} /* b */")]


def test_notrace_N_b() -> None:
    assert body(replay_text(abc(), sym, ReplayOptions(notrace=("b",), start=None))) == [
        col(138, "__cxa_atexit();"), col("", "main() {"), col(30, "  a();"),
        col(50, "} /* main */")]


def test_depth_D_3() -> None:
    assert body(replay_text(abc(), sym, ReplayOptions(depth=3, start=None))) == [
        col(138, "__cxa_atexit();"), col("", "main() {"), col("", "  a() {"),
        col(11, "    b();"), col(30, "  } /* a */"), col(50, "} /* main */")]


def test_depth_counts_from_the_filter() -> None:
    assert body(replay_text(abc(), sym, ReplayOptions(filters=("a",), depth=1))) == [
        col(30, "a();")]


def test_start_symbol_hides_outer_frames_and_what_came_before() -> None:
    recs: list[Record] = [
        Entry(0, 0, 6), Entry(5, 1, 7), Entry(10, 2, 1), Exit(20, 2, 1, 0, 10),
        Entry(30, 2, 2, (1, 0x7FFE0010)), Entry(40, 3, 10, (10,)),
        Exit(90, 3, 10, 3628800, 50), Exit(100, 2, 2, 0, 70),
        Entry(110, 2, 8, (0,)), Exit(150, 2, 8, None, 40, unwound=True, at_exit=True),
        Exit(150, 1, 7, None, 145, unwound=True, at_exit=True),
        Exit(150, 0, 6, None, 150, unwound=True, at_exit=True)]
    assert body(replay_text(recs, sym)) == [
        col("", "main(1, 0x7ffe0010) {"), col(50, "  fact(10) = 0x375f00;"),
        col(70, "} = 0; /* main */"), col(40, "exit(0); /* at exit */")]
    assert body(replay_text(recs, sym, ReplayOptions(start="fact"))) == [
        col(50, "fact(10) = 0x375f00;"), col(40, "exit(0); /* at exit */")]
    assert body(replay_text(recs, sym, ReplayOptions(show_args=False, show_retval=False))) \
        == [col("", "main() {"), col(50, "  fact();"), col(70, "} /* main */"),
            col(40, "exit(); /* at exit */")]


def test_unwound_and_at_exit_frames_are_marked() -> None:
    recs: list[Record] = [
        Entry(0, 0, 2), Entry(1, 1, 15), Entry(2, 2, 16, (42,)), Entry(3, 3, 10, (3,)),
        Exit(4, 3, 10, None, 1, unwound=True),
        Exit(7, 2, 16, None, 5, unwound=True, at_exit=True),
        Exit(9, 1, 15, None, 8, unwound=True, at_exit=True),
        Exit(10, 0, 2, None, 10, unwound=True, at_exit=True)]
    assert body(replay_text(recs, sym)) == [
        col("", "main() {"), col("", "  exit_outer() {"), col("", "    exit_inner(42) {"),
        col(1, "      fact(3); /* unwound */"), col(5, "    } /* exit_inner (at exit) */"),
        col(8, "  } /* exit_outer (at exit) */"), col(10, "} /* main (at exit) */")]


def qsort_records() -> list[Record]:
    m1 = 0xFFFFFFFF  # int -1 in a 64-bit register, upper half clear
    return [
        Entry(0, 0, 2), Entry(10, 1, 12), Entry(20, 2, 13), Entry(30, 3, 14),
        Entry(40, 4, 11, (0x4A0010, 0x4A0014)), Exit(45, 4, 11, m1, 5),
        Entry(50, 4, 11, (0x4A0014, 0x4A0018)), Exit(56, 4, 11, 1, 6),
        Exit(60, 3, 14, None, 30), Exit(70, 2, 13, None, 50), Exit(80, 1, 12, None, 70),
        Exit(90, 0, 2, 0, 90)]


def test_callback_from_libc_with_filters() -> None:
    recs = qsort_records()
    assert body(replay_text(recs, sym, ReplayOptions(notrace=("qsort",)))) == [
        col("", "main() {"), col(70, "  scenario_qsort();"), col(90, "} = 0; /* main */")]
    assert body(replay_text(recs, sym, ReplayOptions(filters=("compare_ints",)))) == [
        col(5, "compare_ints(0x4a0010, 0x4a0014) = -1;"),
        col(6, "compare_ints(0x4a0014, 0x4a0018) = 1;")]
    assert body(replay_text(recs, sym, ReplayOptions(filters=("scenario_qsort",), depth=2))) \
        == [col("", "scenario_qsort() {"), col(50, "  qsort();"),
            col(70, "} /* scenario_qsort */")]
    # -N wins inside -F, and a -F inside a -N region stays hidden
    assert body(replay_text(recs, sym, ReplayOptions(filters=("scenario_qsort",),
                                                       notrace=("msort",)))) == [
        col("", "scenario_qsort() {"), col(50, "  qsort();"), col(70, "} /* scenario_qsort */")]
    assert body(replay_text(recs, sym, ReplayOptions(filters=("compare_ints",),
                                                       notrace=("qsort",)))) == []


def test_values_as_uftrace_auto_format_prints_them() -> None:
    assert format_value(0) == "0"
    assert format_value(100000) == "100000"
    assert format_value(100001) == "0x186a1"
    assert format_value(-100000 & (2**64 - 1)) == "-100000"
    assert format_value(-100001 & (2**64 - 1)) == "0xfffffffffffe795f"
    assert format_value(0x7FFF3B840D74) == "0x7fff3b840d74"
    assert format_value(0xFFFFFFFF) == "-1"  # 32-bit negative in a 64-bit register
    assert format_value(0xFFFF0001) == "-65535"
    assert format_value(0xFFFF0000) == "0xffff0000"
    assert format_value(0xFFFFFFFF, bits=32) == "-1"
    assert format_value(0x80000000, bits=32) == "0x80000000"
    assert format_value(0x1_0000_0005, bits=32) == "5"  # only the ISA's word counts


def test_deterministic() -> None:
    recs = qsort_records()
    a = replay_text(recs, sym, ReplayOptions(start=None))
    assert a == replay_text(list(recs), sym, ReplayOptions(start=None))
    assert a.count("\n") == 11  # header + 2 leaves + 4 entries + 4 exits


def test_indentation_stops_at_max_indent() -> None:
    """Past MAX_INDENT levels a line keeps MAX_INDENT levels of indentation and says its
    depth: the text stays linear in the depth (a guest recursing 10^5 deep would otherwise
    make emutrace write O(d^2) bytes)."""
    from emutrace.trace import format as fmt

    depth = fmt.MAX_INDENT + 40
    records: list[Record] = [Entry(i, i, 0x1000) for i in range(depth)]
    records += [Exit(depth + i, depth - 1 - i, 0x1000, 0, 1) for i in range(depth)]
    lines = list(fmt.iter_replay_lines(records, lambda a: "f", fmt.ReplayOptions(start=None)))
    body = [line.split(" | ", 1)[1] for line in lines if " | " in line]
    widest = max(len(b) - len(b.lstrip(" ")) for b in body)
    assert widest == 2 * fmt.MAX_INDENT
    assert any(b.lstrip(" ").startswith(f"[depth {depth - 1}] f()") for b in body)
    assert not any("[depth" in b for b in body[:fmt.MAX_INDENT + 1])
