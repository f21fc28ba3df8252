"""The crontab reader: every line form cron knows, with cron's meaning, errors by line."""

from __future__ import annotations

import subprocess

import pytest

from jobctl.domain.crontab import (
    DEFAULT_SHELL,
    Entry,
    Problem,
    parse_crontab,
    schedule_name,
    shell_script,
    split_input,
)


def entries(text: str) -> list[Entry]:
    found = parse_crontab(text)
    assert all(isinstance(i, Entry) for i in found), found
    return [i for i in found if isinstance(i, Entry)]


def problems(text: str) -> list[Problem]:
    return [i for i in parse_crontab(text) if isinstance(i, Problem)]


def only(text: str) -> Entry | Problem:
    [item] = parse_crontab(text)
    return item


def test_comments_and_blank_lines_are_skipped_and_lines_keep_their_numbers() -> None:
    text = (
        "# header\n\n   \n  # indented comment\n"
        "*/5 * * * * echo a # shell comment\n\n0 6 * * 1-5 b\n"
    )
    first, second = entries(text)
    assert (first.line, first.expression, first.command) == (
        5,
        "*/5 * * * *",
        "echo a # shell comment",
    )
    assert (second.line, second.expression, second.command) == (7, "0 6 * * 1-5", "b")


def test_an_entry_runs_through_the_default_shell_with_the_command_as_written() -> None:
    entry = only("0  6\t* * *   ./report.sh --full  'two words'")
    assert isinstance(entry, Entry)
    assert entry.expression == "0 6 * * *"  # fields joined by one space
    assert entry.argv == [DEFAULT_SHELL, "-c", "./report.sh --full  'two words'"]
    assert (entry.env, entry.zone, entry.home) == ((), None, None)


@pytest.mark.parametrize(
    ("line", "name", "value"),
    [
        ("FOO=bar", "FOO", "bar"),
        ("FOO = bar baz  ", "FOO", "bar baz"),  # unquoted: trailing blanks trimmed
        ('FOO = "  padded  "', "FOO", "  padded  "),
        ("FOO='single # not a comment'", "FOO", "single # not a comment"),
        ('"MY VAR" = x', "MY VAR", "x"),
        ("'Q'=y", "Q", "y"),
        ("EMPTY=", "EMPTY", ""),
        ('EMPTY=""', "EMPTY", ""),
        ("URL=http://x/?a=b", "URL", "http://x/?a=b"),
        ("  INDENTED=1", "INDENTED", "1"),
    ],
)
def test_environment_lines_follow_cronie(line: str, name: str, value: str) -> None:
    [entry] = entries(f"{line}\n* * * * * true\n")
    assert entry.env == ((name, value),)


def test_variables_apply_only_to_later_entries_and_a_redefinition_wins() -> None:
    text = "* * * * * first\nA=1\nB=2\n* * * * * second\nA=3\n* * * * * third\n"
    first, second, third = entries(text)
    assert first.env == ()
    assert second.env == (("A", "1"), ("B", "2"))
    assert dict(third.env) == {"A": "3", "B": "2"}


def test_shell_home_and_path_are_used_and_passed_on() -> None:
    text = "SHELL=/bin/bash\nHOME=/srv/app\nPATH=/opt/bin:/usr/bin\n@hourly tick\n"
    [entry] = entries(text)
    assert entry.argv == ["/bin/bash", "-c", "tick"]
    assert entry.home == "/srv/app"
    assert dict(entry.env) == {
        "SHELL": "/bin/bash",
        "HOME": "/srv/app",
        "PATH": "/opt/bin:/usr/bin",
    }


def test_cron_tz_sets_the_zone_of_later_entries_and_empty_resets_it() -> None:
    text = "* * * * * host\nCRON_TZ=Asia/Tokyo\n0 6 * * * tokyo\nCRON_TZ=\n0 6 * * * host again\n"
    host, tokyo, again = entries(text)
    assert (host.zone, tokyo.zone, again.zone) == (None, "Asia/Tokyo", None)
    assert tokyo.env == ()  # CRON_TZ configures cron, it is not the command's


def test_tz_only_reaches_the_environment_as_in_cron() -> None:
    [entry] = entries("TZ=Europe/Berlin\n0 6 * * * date\n")
    assert entry.zone is None and entry.env == (("TZ", "Europe/Berlin"),)


def test_an_invalid_cron_tz_is_an_error_on_its_line_and_changes_nothing() -> None:
    items = parse_crontab("CRON_TZ=UTC\nCRON_TZ=Asia/Tokio\n0 6 * * * x\n")
    problem, entry = items
    assert isinstance(problem, Problem) and problem.kind == "error" and problem.line == 2
    assert "did you mean Asia/Tokyo" in problem.message
    assert isinstance(entry, Entry) and entry.zone == "UTC"


def test_mailto_reaches_the_entries_for_failure_mail_and_mailfrom_is_unsupported() -> None:
    items = parse_crontab("MAILTO=ops@example.com\nMAILFROM=cron@x\n* * * * * x\n")
    mailfrom, entry = items
    assert isinstance(mailfrom, Problem) and mailfrom.kind == "unsupported"
    assert mailfrom.line == 2 and "MAILFROM" in mailfrom.message
    assert isinstance(entry, Entry) and entry.env == (("MAILTO", "ops@example.com"),)


def test_an_empty_mailto_means_no_mail_even_with_the_daemons_default() -> None:
    assert entries('MAILTO=""\n* * * * * x\n')[0].env == (("MAILTO", ""),)


def test_mailto_is_not_part_of_an_imported_schedules_name() -> None:
    """Crontabs imported before MAILTO reached the entries keep their names."""
    plain = schedule_name("* * * * *", "UTC", ["sh", "-c", "x"], {"A": "1"}, "/h")
    mailed = {"A": "1", "MAILTO": "ops@example.com"}
    assert schedule_name("* * * * *", "UTC", ["sh", "-c", "x"], mailed, "/h") == plain


@pytest.mark.parametrize(
    "macro", ["@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@HOURLY"]
)
def test_macros_are_entries(macro: str) -> None:
    entry = only(f"{macro}   /usr/bin/thing arg")
    assert isinstance(entry, Entry)
    assert (entry.expression, entry.command) == (macro, "/usr/bin/thing arg")


def test_reboot_is_unsupported_not_an_error() -> None:
    problem = only("@reboot /usr/bin/start-thing")
    assert isinstance(problem, Problem)
    assert (problem.kind, problem.line, problem.expression, problem.command) == (
        "unsupported",
        1,
        "@reboot",
        "/usr/bin/start-thing",
    )
    assert "boot" in problem.message


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ("61 * * * * x", "minute field: 61 is out of range 0-59"),
        ("0 0 L * 1#9 x", "day-of-week field: '1#9'"),
        ("0 0 30 2 * x", "never fires"),
        ("* * * *", "expected 5 time fields (or a macro such as @daily) and a command, got 4"),
        ("* * * * x", "day-of-week field"),
        ("x", "got 1 word"),
        ("* * * * *", "no command after the schedule"),
        ("@daily", "no command after the schedule"),
        ("@fortnightly x", "unknown macro '@fortnightly'"),
        ("* * * * * %only input", "no command before the first '%'"),
        ("BAD='unterminated", "unterminated quote in the value of BAD"),
        ('BAD="v" trailing', "text after the closing quote"),
        ('""=x', "empty variable name"),
        ("JOBCTL_QUEUE=x", "JOBCTL_* variables are set by jobctl"),
        ("HOME=relative/dir", "HOME must be an absolute path"),
        ("SHELL=", "SHELL is empty"),
    ],
)
def test_malformed_lines_are_errors_with_their_line_number(line: str, fragment: str) -> None:
    text = f"# a comment\nA=1\n{line}\n* * * * * fine\n"
    found = parse_crontab(text)
    bad = [i for i in found if isinstance(i, Problem)]
    assert [(p.line, p.kind) for p in bad] == [(3, "error")], found
    assert fragment in bad[0].message
    assert isinstance(found[-1], Entry) and found[-1].line == 4  # the rest is still read


def test_a_line_with_an_error_sets_nothing() -> None:
    problem, entry = parse_crontab("HOME=/ok\nHOME=rel\n* * * * * x\n")
    assert isinstance(problem, Problem) and problem.line == 2
    assert isinstance(entry, Entry) and entry.home == "/ok"


def test_crlf_line_endings_mean_the_same() -> None:
    [entry] = entries("A=1\r\n0 6 * * * echo hi\r\n")
    assert entry.command == "echo hi" and entry.env == (("A", "1"),)


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("date +%Y", ("date +", "Y")),
        (r"date +\%Y", ("date +%Y", None)),
        ("mail -s hi me%line one%line two", ("mail -s hi me", "line one\nline two")),
        ("cat%", ("cat", "")),
        ("cat%%", ("cat", "\n")),
        (r"cat%100\% sure", ("cat", "100% sure")),
        (r"echo a\b%c\d", (r"echo a\b", r"c\d")),  # other backslashes stay, on both sides
        (r"echo \\%x", ("echo \\\\", "x")),  # an escaped backslash does not escape the %
        (r"cat%a\\%b", ("cat", "a\\%b")),  # cronie: in the input, \ before % is dropped
        ("cat%trailing\\", ("cat", "trailing\\")),
        ("no percent", ("no percent", None)),
    ],
)
def test_percent_splits_command_and_input_like_cronie(
    command: str, expected: tuple[str, str | None]
) -> None:
    assert split_input(command) == expected


def test_percent_input_becomes_a_printf_pipe_into_the_whole_command() -> None:
    [entry] = entries("0 6 * * * mail -s 'it''s 100\\%' ops%Hello,%it's done%\n")
    assert entry.command == "mail -s 'it''s 100\\%' ops%Hello,%it's done%"
    assert entry.script == shell_script("mail -s 'it''s 100%' ops", "Hello,\nit's done\n")
    assert entry.script.startswith("printf '%s' 'Hello,\nit'\"'\"'s done\n' | { mail")


@pytest.mark.parametrize(
    ("command", "data", "stdout"),
    [
        ("cat", "one\ntwo", "one\ntwo"),  # no newline added, as under cron
        ("read a; read b; echo $b-$a", "x\ny\n", "y-x\n"),  # the whole list shares stdin
        ("cat # a trailing comment", "kept", "kept"),
        ("cat; true &", "bg", "bg"),  # a trailing & does not swallow the closing brace
        ("printf '%s' \"$(cat)\"", "it's $HOME `x` \\ %", "it's $HOME `x` \\ %"),
        ("cat", "", ""),
    ],
)
def test_the_generated_script_feeds_the_input_exactly(command: str, data: str, stdout: str) -> None:
    script = shell_script(command, data)
    out = subprocess.run(
        ["/bin/sh", "-c", script], stdin=subprocess.DEVNULL, capture_output=True, text=True
    )
    assert (out.returncode, out.stdout, out.stderr) == (0, stdout, "")


def test_percent_input_needs_a_posix_shell() -> None:
    bad = problems("SHELL=/usr/bin/fish\n* * * * * cat%data\n")
    assert [(p.line, p.kind) for p in bad] == [(2, "error")]
    assert "POSIX shell" in bad[0].message and "\\%" in bad[0].message
    [entry] = entries("SHELL=/usr/bin/fish\n* * * * * date +\\%s\n")  # escaped: fine
    assert entry.argv == ["/usr/bin/fish", "-c", "date +%s"]


def test_schedule_names_are_stable_and_change_with_every_part() -> None:
    base = ("0 6 * * *", "UTC", ["/bin/sh", "-c", "x"], {"A": "1", "B": "2"}, "/home/u")
    name = schedule_name(*base)
    assert name.startswith("crontab-") and len(name) == len("crontab-") + 8
    assert schedule_name(*base) == name
    assert schedule_name(base[0], base[1], base[2], {"B": "2", "A": "1"}, base[4]) == name
    variants = [
        ("@daily", *base[1:]),
        (base[0], "Asia/Tokyo", *base[2:]),
        (base[0], base[1], ["/bin/sh", "-c", "y"], *base[3:]),
        (*base[:3], {"A": "1"}, base[4]),
        (*base[:4], "/home/other"),
    ]
    names = {schedule_name(*v) for v in variants}
    assert len(names) == len(variants) and name not in names
