"""Tests of doc_examples.py: `python3 -m unittest discover -s scripts/lib -p 'test_*.py'`."""

import io
import os
import tempfile
import unittest

import doc_examples as de

DOC = """# A document

Some text, then a checked block:

<!-- checked: first -->
```console
$ greeting=hello
$ echo "$greeting world"
hello world
$ printf 'no newline'
no newline
$ echo one \\
    two
one two
```

An unchecked block is left alone:

```console
$ false
```

<!-- checked: second -->
```console
$ echo "$greeting again"; date +%s
hello again
[..]
$ seq 1 5
1
...
5
```
"""


def run_doc(text, names, replacements=(), timeout=10):
    out = io.StringIO()
    blocks = de.parse(text)
    failed = de.run([blocks[n] for n in names], list(replacements), timeout, out=out)
    return failed, out.getvalue()


class ParseTest(unittest.TestCase):
    def test_marked_blocks_are_read_with_their_commands_and_outputs(self):
        blocks = de.parse(DOC)
        self.assertEqual(list(blocks), ["first", "second"])
        steps = blocks["first"].steps
        self.assertEqual([s.command for s in steps][:2], ["greeting=hello", 'echo "$greeting world"'])
        self.assertEqual(steps[1].expected, ["hello world"])
        self.assertEqual(steps[0].expected, [])
        self.assertEqual(steps[3].command, "echo one \\\n    two", "a trailing backslash continues the command")
        self.assertEqual(steps[1].line, 8)

    def test_documents_that_cannot_be_checked_are_refused(self):
        with self.assertRaisesRegex(de.ExampleError, "not followed by a code block"):
            de.parse("<!-- checked: x -->\ntext\n")
        with self.assertRaisesRegex(de.ExampleError, "not closed"):
            de.parse("<!-- checked: x -->\n```\n$ true\n")
        with self.assertRaisesRegex(de.ExampleError, "output before"):
            de.parse("<!-- checked: x -->\n```\nhello\n```\n")
        with self.assertRaisesRegex(de.ExampleError, "second block"):
            de.parse("<!-- checked: x -->\n```\n$ true\n```\n<!-- checked: x -->\n```\n$ true\n```\n")


class MatchTest(unittest.TestCase):
    def test_placeholders(self):
        self.assertTrue(de.matches(["a [..] c"], ["a b b c"]))
        self.assertTrue(de.matches(["a[..]"], ["a"]))
        self.assertFalse(de.matches(["a [..] c"], ["a b d"]))
        self.assertTrue(de.matches(["x", "...", "y"], ["x", "y"]))
        self.assertTrue(de.matches(["x", "...", "y"], ["x", "1", "2", "y"]))
        self.assertFalse(de.matches(["x", "...", "y"], ["x", "1", "z"]))
        self.assertTrue(de.matches(["x  ", ""], ["x", "", ""]), "trailing spaces and empty lines do not count")
        self.assertFalse(de.matches(["x"], ["x", "y"]), "extra output is a difference")
        self.assertFalse(de.matches(["(a+)"], ["aa"]), "expected text is literal, not a regex")


class RunTest(unittest.TestCase):
    def test_matching_blocks_pass_and_share_one_shell(self):
        failed, out = run_doc(DOC, ["first", "second"])
        self.assertEqual(failed, 0, out)
        self.assertIn("ok   first: 4 of 4", out)
        self.assertIn("doc examples: 6 passed, 0 failed", out)

    def test_a_different_answer_fails_and_shows_the_difference(self):
        changed = DOC.replace("hello world\n", "hello there\n")
        failed, out = run_doc(changed, ["first"])
        self.assertEqual(failed, 1)
        self.assertIn("FAIL first, line 8: the command printed something else", out)
        self.assertIn("-hello there", out)
        self.assertIn("+hello world", out)
        self.assertIn("doc examples: 3 passed, 1 failed", out)

    def test_a_failing_command_fails_even_with_the_output_shown(self):
        doc = "<!-- checked: x -->\n```\n$ echo out; exit_code() { return 3; }; exit_code\nout\n```\n"
        failed, out = run_doc(doc, ["x"])
        self.assertEqual(failed, 1)
        self.assertIn("exited 3", out)

    def test_replacements_apply_to_commands_and_expected_output(self):
        doc = "<!-- checked: x -->\n```\n$ echo 127.0.0.1:8080\n127.0.0.1:8080\n```\n"
        failed, out = run_doc(doc, ["x"], [("127.0.0.1:8080", "127.0.0.1:18080")])
        self.assertEqual(failed, 0, out)

    def test_a_command_that_does_not_answer_times_out(self):
        doc = "<!-- checked: x -->\n```\n$ sleep 5\n```\n"
        failed, out = run_doc(doc, ["x"], timeout=0.5)
        self.assertEqual(failed, 1)
        self.assertIn("no answer within 0.5 s", out)

    def test_commands_do_not_read_the_runners_input(self):
        doc = "<!-- checked: x -->\n```\n$ cat\n$ echo after\nafter\n```\n"
        failed, out = run_doc(doc, ["x"])
        self.assertEqual(failed, 0, out)


class MainTest(unittest.TestCase):
    def setUp(self):
        fd, self.path = tempfile.mkstemp(suffix=".md")
        with os.fdopen(fd, "w") as f:
            f.write(DOC)
        self.addCleanup(os.remove, self.path)

    def quiet_main(self, argv):
        import contextlib

        with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()) as err:
            code = de.main(argv)
        return code, out.getvalue() + err.getvalue()

    def test_exit_codes(self):
        self.assertEqual(self.quiet_main(["run", self.path, "first"])[0], 0)
        code, text = self.quiet_main(["run", self.path, "third"])
        self.assertEqual(code, 2)
        self.assertIn("no checked block named third (it has: first, second)", text)
        with open(self.path, "w") as f:
            f.write(DOC.replace("1\n...\n5", "1\n5"))
        self.assertEqual(self.quiet_main(["run", self.path, "second"])[0], 1)

    def test_list_and_commands(self):
        self.assertEqual(self.quiet_main(["list", self.path]), (0, "first\nsecond\n"))
        code, text = self.quiet_main(["commands", self.path, "second"])
        self.assertEqual((code, text), (0, 'echo "$greeting again"; date +%s\nseq 1 5\n'))


if __name__ == "__main__":
    unittest.main()
