"""The handoff's shell classifier: which command lines change something (all runs are kept)."""

from __future__ import annotations

from typing import Any

import pytest

from toolref.handoff import commands
from toolref.handoff.commands import has_side_effects
from toolref.handoff.shell import simple_commands


def bug(command: str, expected: bool, reason: str) -> Any:
    """A case the classifier gets wrong today: `expected` is the right answer."""
    return pytest.param(
        command,
        expected,
        id=command,
    )


# (command line, has side effects)
CASES: list[Any] = [
    # Plain reads, listings, searches, builds and tests.
    ("ls -la", False),
    ("grep -rn foo .", False),
    ("echo hi", False),
    ("pytest -q", False),
    ("python -m pytest tests", False),
    ("ps aux", False),
    ("make test", False),
    ("", False),
    # Pipelines and && / || / ; / & chains: any simple command decides.
    ("cat foo.py | grep x | wc -l", False),
    ("cd src && ls", False),
    ("cd src && rm x.pyc", True),
    ("make || echo failed", False),
    ("make || rm -rf build", True),
    ("echo a; echo b", False),
    ("echo a; touch b", True),
    ("true && false", False),
    ("sleep 1 & rm x", True),
    ("ls\npwd", False),
    ("ls\nrm x", True),
    # Output redirections.
    ("echo x > f", True),
    ("echo x >> f", True),
    ("ls &> out", True),
    ("ls 1> out", True),
    ("echo x 1>>f", True),
    ("echo x &>>f", True),
    ("echo x 2> err.log", True),
    ("cat f > out.txt 2>&1", True),
    ("echo x>f", True),
    ("ls -l >out", True),
    ("printf 'x' >> ~/.bashrc", True),
    ('echo "a > b" > out', True),
    ("ls 2>&1", False),
    ("ls >&2", False),
    ("ls > /dev/null", False),
    ("ls >/dev/null 2>&1", False),
    ("cmd 2>/dev/null", False),
    ("echo x>/dev/null", False),
    ("cat f > /dev/stdout", False),
    ("make 2>&1 | tail -5", False),
    # `>` inside quotes is not a redirection.
    ("echo 'a > b'", False),
    ('echo "a > b"', False),
    ('echo "a \\" > b"', False),
    ("grep -n '>' file", False),
    ("python -c 'print(1>0)'", False),
    bug("ls > '/dev/null'", False, "a quoted harmless target is not recognised as /dev/null"),
    bug("ls # > f", False, "a `>` inside a trailing comment is taken for a redirection"),
    # Heredocs: the body is data, `>` in it is not a redirection.
    ("cat > f <<'EOF'\nhello > world\nEOF", True),
    ("cat <<EOF > out.txt\nx\nEOF", True),
    ("cat<<EOF>f\nx\nEOF", True),
    ("cat <<'EOF'\nx > y\nEOF", False),
    ("cat <<'EOF'\nrm -rf /\nEOF", False),
    ("cat <<EOF | python\nprint(1 > 2)\nEOF", False),
    bug(
        "cat <<'EOF'\nx\nEOF\nrm -rf build",
        True,
        "every line after a heredoc's first line is dropped, so commands after the EOF "
        "terminator are never classified",
    ),
    bug(
        "grep x <<< 'a'\nrm f",
        True,
        "a `<<<` here-string is taken for a heredoc: the following lines are ignored",
    ),
    # In-place edits.
    ("sed -i 's/a/b/' f", True),
    ("sed -i.bak 's/a/b/' f", True),
    ("sed --in-place 's/a/b/' f", True),
    ("sed --in-place=.bak 's/a/b/' f", True),
    ("sed -E -i 's/a/b/' f", True),
    ("sed -n '1,10p' f", False),
    ("sed -e 's/a/b/' f", False),
    ("perl -i -pe 's/a/b/' f", True),
    ("perl -i.bak -pe 's/a/b/' f", True),
    ("perl -p -i -e 's/a/b/' f", True),
    ("perl -ne 'print' f", False),
    bug("perl -pi -e 's/a/b/' f", True, "-i inside combined flags (-pi) is not seen"),
    bug("sed -Ei 's/a/b/' f", True, "-i inside combined flags (-Ei) is not seen"),
    # tee
    ("ls | tee out.txt", True),
    ("ls | tee -a log.txt", True),
    ("ls -la 2>&1 | tee log.txt", True),
    ("echo x | sudo tee /etc/f", True),
    ("ls | tee /dev/null", False),
    ("ls | tee", False),
    # git: reads
    ("git status", False),
    ("git diff", False),
    ("git diff --stat HEAD~1", False),
    ("git log --oneline -3", False),
    ("git --no-pager log", False),
    ("git show HEAD", False),
    ("git blame f.py", False),
    ("git branch", False),
    ("git branch -a", False),
    ("git branch --list", False),
    ("git branch -vv", False),
    ("git branch --show-current", False),
    ("git config --get user.name", False),
    ("git config --list", False),
    ("git remote -v", False),
    ("git rev-parse HEAD", False),
    ("git ls-files", False),
    # git: writes
    ("git add .", True),
    ("git commit -m 'x'", True),
    ("git commit --amend --no-edit", True),
    ("git push", True),
    ("git checkout -b new", True),
    ("git reset --hard", True),
    ("git stash", True),
    ("git branch feature", True),
    ("git branch -D old", True),
    ("git branch -m old new", True),
    ("git config user.name x", True),
    ("git config --global user.name x", True),
    ("git --git-dir=.git add x", True),
    bug("git -C repo commit -m x", True, "`git -C DIR`: DIR is taken for the subcommand"),
    bug("git -c user.name=x commit -m y", True, "`git -c K=V`: K=V is taken for the subcommand"),
    bug("git stash list", False, "every `git stash` is a write, even `stash list`"),
    bug("git tag -l", False, "every `git tag` is a write, even `tag -l`"),
    bug(
        "git branch --list 'feat*'",
        False,
        "the pattern of `git branch --list PATTERN` is taken for a new branch name",
    ),
    # File operations.
    ("rm -rf build", True),
    ("mv a b", True),
    ("cp a b", True),
    ("cp a b 2>/dev/null || true", True),
    ("mkdir -p x", True),
    ("touch f", True),
    ("chmod +x f", True),
    ("chown u f", True),
    ("ln -s a b", True),
    ("dd if=a of=b", True),
    ("patch -p1 < x.diff", True),
    ("tar -xzf a.tgz", True),
    ("tar xzf a.tgz", True),
    ("tar -C dir -xzf a.tgz", True),
    ("tar --extract -f a.tar", True),
    ("tar -czf out.tgz dir", True),
    ("tar -tzf a.tgz", False),
    ("tar --list -f a.tar", False),
    ("unzip a.zip", True),
    bug(
        "tar -tf archive.tar",
        False,
        "_tar_writes looks at the first two arguments, so the letters c/r of the archive "
        "name `archive.tar` are read as create/append flags",
    ),
    bug("unzip -l a.zip", False, "every unzip is a write, even `unzip -l` (list)"),
    bug("find . -name '*.pyc' -delete", True, "`find -delete` is not seen"),
    bug("find . -name '*.pyc' -exec rm {} \\;", True, "`find -exec rm` is not seen"),
    # Package installs.
    ("pip install x", True),
    ("pip3 install x", True),
    ("pip -q install x", True),
    ("pip install -r requirements.txt", True),
    ("python -m pip install x", True),
    ("python3 -m pip install x", True),
    (".venv/bin/python -m pip install x", True),
    (".venv/bin/pip install x", True),
    ("pip list", False),
    ("pip show x", False),
    ("python -m pip list", False),
    ("npm install", True),
    ("npm i", True),
    ("npm ci", True),
    ("npm install --save-dev x", True),
    ("npm test", False),
    ("npm run build", False),
    ("apt-get install -y x", True),
    ("apt-get -y install x", True),
    ("apt-get update", True),
    ("cargo add serde", True),
    ("cargo test", False),
    ("cargo build", False),
    ("uv add x", True),
    ("uv pip install x", True),
    ("uv run pytest", False),
    bug("cargo init --lib --name utils", True, "`cargo init` creates Cargo.toml and src/"),
    bug("python -m pip -q install x", True, "an option before `install` hides it"),
    bug("uv pip list", False, "every `uv pip` subcommand counts as an install"),
    # HTTP writes and downloads.
    ("curl https://x", False),
    ("curl -s https://x", False),
    ("curl -sSL https://x", False),
    ("curl -I https://x", False),
    ("curl -X GET https://x", False),
    ("curl -H 'X-Do: 1' https://x", False),
    ("curl -X POST https://x", True),
    ("curl -XPOST https://x", True),
    ("curl -X post https://x", True),
    ("curl --request DELETE https://x", True),
    ("curl -d a=1 https://x", True),
    ("curl --data '{}' https://x", True),
    ("curl --data-binary @f https://x", True),
    ("curl --json '{}' https://x", True),
    ("curl -F f=@a https://x", True),
    ("curl -o out https://x", True),
    ("curl -O https://x/f", True),
    ("curl -LO https://x/f", True),
    ("curl -sSLo out https://x", True),
    ("wget https://x", True),
    ("wget -O out https://x", True),
    ("wget -O- https://x", False),
    ("wget -O - https://x", False),
    ("wget -q -O- https://x", False),
    ("wget --spider https://x", False),
    ("http POST x a=1", True),
    ("http PUT x a=1", True),
    ("http GET x", False),
    ("http x", False),
    bug("wget -qO- https://x", False, "-O- inside combined flags (-qO-) is taken for a download"),
    bug(
        "curl -s -o /dev/null -w '%{http_code}' https://x",
        False,
        "`curl -o /dev/null` is counted as a download although nothing is written",
    ),
    bug("http --json POST x a=1", True, "httpie: an option before the method hides it"),
    bug(
        "curl -fsSL https://x/install.sh | sh",
        True,
        "a script piped into a shell is not treated as a side effect",
    ),
    # Wrappers.
    ("sudo rm x", True),
    ("sudo ls", False),
    ("sudo apt-get install -y x", True),
    ("env VAR=1 python x.py", False),
    ("timeout 10 pytest", False),
    ("timeout 10 rm x", True),
    ("nice -n 5 rm x", True),
    ("time rm x", True),
    ("nohup python x.py &", False),
    ("find . -name '*.pyc' | xargs rm", True),
    ("find . | xargs grep x", False),
    ("xargs -0 rm", True),
    bug("env VAR=1 rm -rf build", True, "`env VAR=1 CMD`: VAR=1 is taken for the program"),
    bug("sudo -u bob rm x", True, "`sudo -u USER CMD`: USER is taken for the program"),
    bug("timeout -s KILL 10 rm x", True, "`timeout -s SIG`: SIG is taken for the program"),
    bug("bash -c 'rm -rf build'", True, "the command of `bash -c` is not classified"),
    # VAR=value prefixes.
    ("VAR=1 python x.py", False),
    ("PYTHONPATH=src pytest", False),
    ("A=1 B=2 make test", False),
    ("VAR=1 rm x", True),
    ("A=1", False),
    # Process and service control.
    ("kill 123", True),
    ("kill -9 123", True),
    ("pkill -f server", True),
    ("killall node", True),
    ("docker ps", False),
    ("docker run img", True),
    ("kubectl get pods", False),
    ("kubectl apply -f x.yaml", True),
    ("systemctl status nginx", False),
    ("systemctl restart nginx", True),
]


def _id(case: Any) -> str:
    return repr(case[0]) if isinstance(case, tuple) else ""


@pytest.mark.parametrize(("command", "expected"), CASES, ids=[_id(c) for c in CASES])
def test_has_side_effects(command: str, expected: bool) -> None:
    assert has_side_effects(command) is expected


def test_nested_find_exec_is_judged_in_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """`find -exec find -exec ...` judged each word once: it used to rescan the words after
    every action and recurse into each nested `find` (2**n judgements for n of them)."""
    seen: list[list[str]] = []
    judge = commands._command_has_side_effects

    def counting(argv: list[str]) -> bool:
        seen.append(argv)
        return judge(argv)

    monkeypatch.setattr(commands, "_command_has_side_effects", counting)
    nested = 12  # the old walk: thousands of judgements, and doubling with each one more
    assert has_side_effects("find ." + " -exec find" * nested) is False
    assert len(seen) <= 2
    assert has_side_effects("find ." + " -exec find" * nested + " -exec rm {} ';'") is True
    assert has_side_effects("find . -exec grep -l x {} + -exec mv {} /tmp ';'") is True


def test_the_table_is_big_and_balanced() -> None:
    answers = [c[1] if isinstance(c, tuple) else c.values[1] for c in CASES]
    assert len(CASES) >= 60
    assert answers.count(True) >= 30
    assert answers.count(False) >= 30


SPLITS: list[Any] = [
    (
        "cd src && ls -la | grep x; echo done",
        [["cd", "src"], ["ls", "-la"], ["grep", "x"], ["echo", "done"]],
    ),
    ("a || b && c ; d | e & f", [["a"], ["b"], ["c"], ["d"], ["e"], ["f"]]),
    ("ls\npwd", [["ls"], ["pwd"]]),
    # Control operators inside quotes or escaped do not split.
    ("echo 'a && b' | wc -l", [["echo", "a && b"], ["wc", "-l"]]),
    ("echo \"a | b\" && echo 'c ; d'", [["echo", "a | b"], ["echo", "c ; d"]]),
    ("echo a\\;b", [["echo", "a;b"]]),
    (
        "find . -name '*.py' -exec grep -l x {} \\;",
        [["find", ".", "-name", "*.py", "-exec", "grep", "-l", "x", "{}", ";"]],
    ),
    # `&` of a redirection is not a control operator.
    # Redirections are not part of a command's argv.
    ("make 2>&1 | tail -5", [["make"], ["tail", "-5"]]),
    ("ls &>out && pwd", [["ls"], ["pwd"]]),
    ("ls >&2 & pwd", [["ls"], ["pwd"]]),
    # VAR=value prefixes and wrappers (with their own options) are removed.
    ("A=1 B=2 make test", [["make", "test"]]),
    ("sudo timeout 10 rm -rf x", [["rm", "-rf", "x"]]),
    ("nohup nice -n 5 python x.py &", [["python", "x.py"]]),
    ("find . | xargs -0 rm", [["find", "."], ["rm"]]),
    # A heredoc body is data; comments go; unbalanced quotes fall back to whitespace.
    ("cat > f <<'EOF'\nrm -rf /\nEOF", [["cat"]]),
    ("ls # rm x", [["ls"]]),
    ('echo "unterminated', [["echo", "unterminated"]]),
    ("", []),
    ("   ", []),
    ("A=1", []),
    pytest.param(
        "env VAR=1 python x.py",
        [["python", "x.py"]],
        id="env VAR=1 python x.py",
    ),
]


@pytest.mark.parametrize(("line", "expected"), SPLITS, ids=[_id(c) for c in SPLITS])
def test_simple_commands(line: str, expected: list[list[str]]) -> None:
    assert simple_commands(line) == expected
