#!/usr/bin/env python3
"""Runs the console examples of a Markdown document and checks their answers.

A checked example is the fenced code block right after a marker line:

    <!-- checked: quickstart -->
    ```console
    $ key=$(printf demo | sha256sum | cut -d' ' -f1)
    $ curl -s -w '%{http_code}\\n' http://127.0.0.1:8080/v1/filters/demo/keys/$key
    {"seen":true,"answered_by":"database"}200
    ```

Lines starting with `$ ` are commands (a command whose line ends with `\\` goes on to the
next line); the lines after a command, up to the next one, are its expected output (stdout
and stderr together, as a terminal shows them). The commands of every block named in one run
go, in order, to one bash process, so variables set by one command are there for the next.
A command that exits non-zero fails the check.

Expected output is compared line by line (trailing spaces and trailing empty lines ignored),
with two placeholders for what varies from run to run (trycmd's syntax):

    [..]    within a line: any text, possibly none (a timestamp, a generation number)
    ...     a line of its own: any number of lines, possibly none

`--replace OLD=NEW` rewrites OLD to NEW in the commands and in the expected output before
anything runs, so a document can show the default address (127.0.0.1:8080) while a check
runs on another port.

    doc_examples.py run README.md quickstart [more blocks] [--replace OLD=NEW]... [--timeout S]
    doc_examples.py commands README.md quickstart-serve   # the block's commands, one a line
    doc_examples.py list README.md                        # the names of the checked blocks
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import re
import selectors
import signal
import subprocess
import sys
import time
import uuid

MARKER = re.compile(r"^<!--\s*checked:\s*([\w.-]+)\s*-->\s*$")
FENCE = re.compile(r"^(`{3,}|~{3,})")


class ExampleError(Exception):
    """A document or a command line that cannot be read as checked examples."""


@dataclasses.dataclass
class Step:
    """One command and the lines it is expected to print."""

    command: str
    expected: list[str]
    line: int  # 1-based line of the command in the document


@dataclasses.dataclass
class Block:
    """A checked code block."""

    name: str
    steps: list[Step]
    line: int


def parse(text: str) -> dict[str, Block]:
    """The checked blocks of a Markdown text, by name."""
    lines = text.splitlines()
    blocks: dict[str, Block] = {}
    i = 0
    while i < len(lines):
        marker = MARKER.match(lines[i].strip())
        i += 1
        if not marker:
            continue
        name = marker.group(1)
        if name in blocks:
            raise ExampleError(f"line {i}: a second block named {name!r}")
        while i < len(lines) and not lines[i].strip():
            i += 1
        fence = FENCE.match(lines[i].strip()) if i < len(lines) else None
        if not fence:
            raise ExampleError(f"line {i}: the marker {name!r} is not followed by a code block")
        start = i + 1
        end = start
        while end < len(lines) and not lines[end].strip().startswith(fence.group(1)):
            end += 1
        if end == len(lines):
            raise ExampleError(f"line {start}: the code block of {name!r} is not closed")
        blocks[name] = Block(name, _steps(lines[start:end], start + 1), start)
        i = end + 1
    return blocks


def _steps(body: list[str], first_line: int) -> list[Step]:
    steps: list[Step] = []
    i = 0
    while i < len(body):
        line = body[i]
        if not line.startswith("$ "):
            if not steps:
                raise ExampleError(f"line {first_line + i}: output before the first `$ ` command")
            steps[-1].expected.append(line)
            i += 1
            continue
        number = first_line + i
        command = [line[2:]]
        while command[-1].endswith("\\") and i + 1 < len(body):
            i += 1
            command.append(body[i])
        steps.append(Step("\n".join(command), [], number))
        i += 1
    if not steps:
        raise ExampleError(f"line {first_line}: a checked block without a `$ ` command")
    return steps


def _line_pattern(expected: str) -> re.Pattern[str]:
    return re.compile(".*?".join(re.escape(part) for part in expected.split("[..]")), re.DOTALL)


def matches(expected: list[str], actual: list[str]) -> bool:
    """Whether `actual` fits `expected`, placeholders included."""
    expected = _trimmed(expected)
    actual = _trimmed(actual)
    # fits[i][j]: expected[i:] matches actual[j:]
    fits = [[False] * (len(actual) + 1) for _ in range(len(expected) + 1)]
    fits[len(expected)][len(actual)] = True
    for i in range(len(expected) - 1, -1, -1):
        for j in range(len(actual), -1, -1):
            if expected[i] == "...":
                fits[i][j] = fits[i + 1][j] or (j < len(actual) and fits[i][j + 1])
            else:
                fits[i][j] = (
                    j < len(actual)
                    and _line_pattern(expected[i]).fullmatch(actual[j]) is not None
                    and fits[i + 1][j + 1]
                )
    return fits[0][0]


def _trimmed(lines: list[str]) -> list[str]:
    out = [line.rstrip() for line in lines]
    while out and not out[-1]:
        out.pop()
    return out


class Shell:
    """One bash process that runs commands in turn and reports each one's output."""

    def __init__(self, cwd: str | None = None):
        self.mark = f"__doc_examples_{uuid.uuid4().hex}__"
        self.proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env={**os.environ, "TERM": "dumb"},
            start_new_session=True,  # its own process group: close() ends what it started
        )
        self.pending = b""

    def run(self, command: str, timeout: float) -> tuple[int, list[str]]:
        """Runs `command` (no stdin); its exit code and output lines."""
        # Braces keep assignments in this shell; the mark follows the output on a line of
        # its own, or ends the output's last line when that line has no newline.
        script = f"{{\n{command}\n}} </dev/null 2>&1\nprintf '%s %s\\n' '{self.mark}' \"$?\"\n"
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(script.encode())
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        selector = selectors.DefaultSelector()
        selector.register(self.proc.stdout, selectors.EVENT_READ)
        tail = re.compile(re.escape(self.mark).encode() + rb" (\d+)\n")
        while True:
            found = tail.search(self.pending)
            if found:
                output = self.pending[: found.start()].decode(errors="replace")
                self.pending = self.pending[found.end() :]
                return int(found.group(1)), output.split("\n") if output else []
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                raise TimeoutError(f"no answer within {timeout:g} s")
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                raise ExampleError("bash exited (a command ran `exit`?)")
            self.pending += chunk

    def close(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


def apply(replacements: list[tuple[str, str]], text: str) -> str:
    for old, new in replacements:
        text = text.replace(old, new)
    return text


def run(blocks: list[Block], replacements: list[tuple[str, str]], timeout: float, out=sys.stdout) -> int:
    """Runs the blocks' commands in one shell; the number of steps that failed."""
    shell = Shell()
    failed = passed = 0
    try:
        for block in blocks:
            block_failed = 0
            for step in block.steps:
                command = apply(replacements, step.command)
                expected = [apply(replacements, line) for line in step.expected]
                try:
                    code, actual = shell.run(command, timeout)
                except TimeoutError as err:
                    print(f"FAIL {block.name}, line {step.line}: {err}\n  $ {command}", file=out)
                    return failed + 1
                if code == 0 and matches(expected, actual):
                    passed += 1
                    continue
                block_failed += 1
                why = f"exited {code}" if code else "printed something else"
                print(f"FAIL {block.name}, line {step.line}: the command {why}\n  $ {command}", file=out)
                diff = difflib.unified_diff(_trimmed(expected), _trimmed(actual), "expected", "actual", lineterm="")
                for line in diff:
                    print(f"  {line}", file=out)
            failed += block_failed
            state = "ok  " if not block_failed else "FAIL"
            print(f"{state} {block.name}: {len(block.steps) - block_failed} of {len(block.steps)} commands as shown", file=out)
    finally:
        shell.close()
    print(f"doc examples: {passed} passed, {failed} failed", file=out)
    return failed


def _replacement(text: str) -> tuple[str, str]:
    old, sep, new = text.partition("=")
    if not sep or not old:
        raise argparse.ArgumentTypeError(f"{text!r} is not OLD=NEW")
    return old, new


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    run_p = sub.add_parser("run", help="run blocks and compare their output")
    run_p.add_argument("document")
    run_p.add_argument("blocks", nargs="+")
    run_p.add_argument("--replace", type=_replacement, action="append", default=[], metavar="OLD=NEW")
    run_p.add_argument("--timeout", type=float, default=60, help="seconds per command (60)")
    cmd_p = sub.add_parser("commands", help="print a block's commands, one a line")
    cmd_p.add_argument("document")
    cmd_p.add_argument("block")
    list_p = sub.add_parser("list", help="print the names of the checked blocks")
    list_p.add_argument("document")
    args = parser.parse_args(argv)
    try:
        with open(args.document, encoding="utf-8") as f:
            blocks = parse(f.read())
        if args.action == "list":
            print("\n".join(blocks))
            return 0
        names = args.blocks if args.action == "run" else [args.block]
        missing = [n for n in names if n not in blocks]
        if missing:
            raise ExampleError(f"no checked block named {', '.join(missing)} (it has: {', '.join(blocks) or 'none'})")
        if args.action == "commands":
            print("\n".join(step.command for step in blocks[args.block].steps))
            return 0
        return 1 if run([blocks[n] for n in names], args.replace, args.timeout) else 0
    except ExampleError as err:
        print(f"doc_examples: {args.document}: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
