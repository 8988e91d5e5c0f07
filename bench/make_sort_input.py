"""The input of the busybox `sort` rows of `emutrace bench --target native`: 20 lines of
pseudo-random lower-case words from a fixed linear congruential generator (the constants
of Numerical Recipes' `ranqd1`), so the file and the program's work are the same on every
machine.

    python bench/make_sort_input.py > bench/inputs/sort20.txt
"""

from __future__ import annotations

import sys

LINES = 20


def lines(count: int = LINES, seed: int = 2026) -> list[str]:
    state, out = seed, []
    for _ in range(count):
        words = []
        for _ in range(1 + state % 4):
            state = (1664525 * state + 1013904223) % 2**32
            length = 3 + (state >> 8) % 8
            letters = []
            for _ in range(length):
                state = (1664525 * state + 1013904223) % 2**32
                letters.append(chr(ord("a") + (state >> 16) % 26))
            words.append("".join(letters))
        out.append(" ".join(words))
    return out


if __name__ == "__main__":
    sys.stdout.write("\n".join(lines()) + "\n")
