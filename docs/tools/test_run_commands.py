#!/usr/bin/python3
"""docs/tools/run_commands.py follows a page as it says: small pages in a temporary tree, each
run as the runner runs README.md. `run_commands.py --self-test` runs these; so does
`/usr/bin/python3 -m unittest docs/tools/test_run_commands.py`."""

import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_commands  # noqa: E402  (beside this file)

FENCE = "```"


class Tree:
    """A temporary repository root with a page, and a build directory beside it."""

    def __init__(self, page_text, files=None):
        self.dir = tempfile.mkdtemp(prefix="pushpull-run-commands-test-")
        self.root = os.path.join(self.dir, "root")
        self.build = os.path.join(self.dir, "the-build")
        os.makedirs(os.path.join(self.build, "bin"))
        os.makedirs(os.path.join(self.root, "examples"))
        for name, text in (files or {}).items():
            with open(os.path.join(self.root, name), "w") as f:
                f.write(text)
        with open(os.path.join(self.root, "PAGE.md"), "w") as f:
            f.write(page_text.replace("'''", FENCE))
        self.lines = []

    def run(self, timeout=30):
        return run_commands.run(self.root, self.build, ["PAGE.md"], timeout, self.lines.append)

    def text(self):
        return "\n".join(self.lines)

    def remove(self):
        shutil.rmtree(self.dir, ignore_errors=True)


class RunCommandsTest(unittest.TestCase):
    def page(self, text, files=None):
        tree = Tree(text, files)
        self.addCleanup(tree.remove)
        return tree

    def test_a_documented_exit_status_passes(self):
        tree = self.page("""\
'''sh
sh -c 'exit 3'   # exits 3: on purpose
'''
""")
        self.assertEqual(tree.run(), 0, tree.text())
        self.assertIn("exit 3 as documented", tree.text())

    def test_an_undocumented_exit_status_fails_naming_the_command(self):
        tree = self.page("""\
# A page

'''sh
true
sh -c 'echo the reason; exit 3'
echo never
'''
""")
        self.assertEqual(tree.run(), 1, tree.text())
        self.assertIn("FAILED: PAGE.md:5: `sh -c 'echo the reason; exit 3'`: exit 3, documented 0", tree.text())
        self.assertIn("its output ended:\n  | the reason", tree.text())  # its output's tail, at the end
        self.assertNotIn("PAGE.md:6: echo never", tree.text())  # the page's later commands do not run

    def test_a_status_other_than_the_documented_one_fails(self):
        tree = self.page("""\
'''sh
true   # exits 3: a status the command does not have
'''
""")
        self.assertEqual(tree.run(), 1, tree.text())
        self.assertIn("exit 0, documented 3", tree.text())

    def test_a_marked_file_is_written_and_used_and_is_not_run(self):
        tree = self.page("""\
<!-- greet.sh: run by docs/tools/run_commands.py -->
'''sh
echo hello from greet.sh
exit 7
'''

'''sh
test "$(sh greet.sh | head -1)" = "hello from greet.sh"
'''
""")
        self.assertEqual(tree.run(), 0, tree.text())
        self.assertIn("PAGE.md:2: wrote greet.sh", tree.text())

    def test_a_file_comes_only_where_the_page_defines_it(self):
        tree = self.page("""\
'''sh
cat later.txt
'''

<!-- later.txt: run by docs/tools/run_commands.py -->
'''text
hi
'''
""")
        self.assertEqual(tree.run(), 1, tree.text())

    def test_export_and_cd_hold_for_the_rest_of_the_page(self):
        tree = self.page("""\
'''sh
export GREETING=hello
mkdir -p sub/dir && cd sub/dir
'''

'''bash
test "$GREETING" = hello
test "$(basename "$PWD")" = dir
'''
""")
        self.assertEqual(tree.run(), 0, tree.text())

    def test_the_directory_links_the_build_and_the_tree_and_home_is_fresh(self):
        tree = self.page("""\
'''sh
test -d build/bin && test "$(readlink build)" = "$EXPECTED_BUILD"
test -f notes.txt && test -d examples && test ! -L examples
test "$HOME" != "$CALLER_HOME" && test -d "$HOME" && test -z "$(ls -A "$HOME")"
touch examples/made-here
'''
""", files={"notes.txt": "a file of the tree\n"})
        os.environ["EXPECTED_BUILD"], os.environ["CALLER_HOME"] = tree.build, os.environ.get("HOME", "")
        try:
            self.assertEqual(tree.run(), 0, tree.text())
        finally:
            del os.environ["EXPECTED_BUILD"], os.environ["CALLER_HOME"]
        self.assertFalse(os.path.exists(os.path.join(tree.root, "examples", "made-here")))  # a copy

    def test_continuation_lines_join_and_comments_and_placeholders_are_left_out(self):
        tree = self.page("""\
'''sh
# a comment line
test "$(echo a \\
  b)" = "a b"
some-command --flag=... # a placeholder
'''
""")
        self.assertEqual(tree.run(), 0, tree.text())
        self.assertIn("run-commands: 1 command on 1 page in", tree.text())

    def test_make_test_make_demo_and_sudo_are_skipped_with_their_reason(self):
        tree = self.page("""\
'''sh
make test   # runs every test
make demo
sudo rm -rf /nothing-here
'''
""")
        self.assertEqual(tree.run(), 0, tree.text())
        self.assertIn("skipped PAGE.md:2 make test: `make test` runs these commands itself", tree.text())
        self.assertIn("skipped PAGE.md:3 make demo", tree.text())
        self.assertIn("skipped PAGE.md:4 sudo rm -rf /nothing-here: it needs root (sudo)", tree.text())

    def test_make_deps_runs_when_nothing_is_missing(self):
        tree = self.page("""\
'''sh
make deps
'''
""", files={"Makefile": "deps:\n\t@echo 'make deps: all packages present'\n"})
        self.assertEqual(tree.run(), 0, tree.text())
        self.assertIn("exit 0 as documented", tree.text())

    def test_make_deps_is_skipped_when_it_would_install(self):
        tree = self.page("""\
'''sh
make deps
test -z "$(command -v apt-get | grep stubs)"
'''
""", files={"Makefile": "deps:\n\t@echo 'make deps: installing foo'; apt-get update && apt-get install foo\n"})
        self.assertEqual(tree.run(), 0, tree.text())
        self.assertIn("it would install packages with apt-get (make deps: installing foo)", tree.text())

    def test_the_shown_output_is_checked_with_numbers_masked(self):
        tree = self.page("""\
'''sh
printf 'step 7 took 12 ms\\n[launch] job succeeded\\n'
'''

It prints:

'''text
step 1 took 3 ms
[launch] job succeeded
'''
""")
        self.assertEqual(tree.run(), 0, tree.text())
        self.assertIn("output as shown", tree.text())

    def test_output_the_command_does_not_print_fails(self):
        tree = self.page("""\
'''sh
echo '[launch] job failed'
'''

'''
[launch] job succeeded
'''
""")
        self.assertEqual(tree.run(), 1, tree.text())
        self.assertIn("the page shows the line '[launch] job succeeded'", tree.text())

    def test_a_smaller_run_replaces_what_the_page_names(self):
        tree = self.page("""\
<!-- run_commands: --seconds=600 => --seconds=0 -->
'''sh
sleep_for() { sleep "${1#--seconds=}"; }; sleep_for --seconds=600
'''
""")
        self.assertEqual(tree.run(timeout=20), 0, tree.text())
        self.assertIn("the page's sleep_for() { sleep", tree.text())

    def test_a_smaller_run_that_names_nothing_on_the_block_is_an_error(self):
        tree = self.page("""\
<!-- run_commands: --epochs=5 => --epochs=1 -->
'''sh
true --epochs=2
'''
""")
        self.assertEqual(tree.run(), 2, tree.text())
        self.assertIn("no command of the block below holds '--epochs=5'", tree.text())

    def test_a_command_past_its_timeout_fails(self):
        tree = self.page("""\
'''sh
sleep 30
'''
""")
        self.assertEqual(tree.run(timeout=1), 1, tree.text())
        self.assertIn("timed out", tree.text())

    def test_the_comment_that_documents_a_status(self):
        status = run_commands.documented_status
        self.assertEqual(status("launch -- ./fit   # exits 3: the target is missed"), 3)
        self.assertEqual(status("launch -- ./fit"), 0)
        self.assertEqual(status("echo '# exits 3'"), 0)  # quoted: not a comment
        self.assertEqual(status("echo \"a # exits 3\""), 0)
        self.assertEqual(status("make   # it exits 3 when ..."), 0)  # only a comment that starts so
        self.assertEqual(status("x=${y#exits 3}"), 0)
        self.assertEqual(run_commands.bare("make deps   # once"), "make deps")


if __name__ == "__main__":
    unittest.main()
