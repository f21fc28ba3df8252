"""The daemon's settings, what a value may be and how a bad one is reported: errors in the
file, the duration syntax, and errors and values of the environment and of flags (split
from test_config.py, which holds the defaults, the precedence of the layers, the
declaration and the log format; the helpers are its own).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jobctl.config import DERIVED, ConfigError, format_seconds, load
from jobctl.domain.durations import parse_duration
from tests.unit.test_config import USER, error_of, write

# --------------------------------------------------------------------------- file errors


def test_a_bad_value_names_the_file_the_key_and_the_problem(tmp_path: Path) -> None:
    path = write(tmp_path, 'concurrency = "many"\n')
    assert error_of(path) == f'{path}: concurrency: must be an integer from 1 to 100000, got "many"'


def test_a_value_in_a_table_is_named_with_its_table(tmp_path: Path) -> None:
    path = write(tmp_path, "[retry]\nmax_attempts = 0\n")
    assert error_of(path) == f"{path}: retry.max_attempts: must be an integer from 1 to 1000, got 0"


def test_a_toml_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "concurrency = 4\nlease_ttl = \n")
    assert error_of(path) == f"{path}: invalid TOML at line 2, column 13: invalid value"
    path = write(tmp_path, 'db = "unterminated\n', "b.toml")
    assert error_of(path).startswith(f"{path}: invalid TOML at line 1, ")


def test_a_file_that_is_not_utf8_or_not_readable(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'socket_group = "caf\xe9"\n')
    assert error_of(path) == f"{path}: not UTF-8 text"
    assert error_of(tmp_path) == f"{tmp_path}: cannot read: Is a directory"


def test_a_named_file_must_exist_but_the_default_need_not(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    assert error_of(missing) == f"{missing}: no such config file (from flag --config)"
    env = {"JOBCTL_CONFIG": str(missing)}
    assert error_of(env=env) == f"{missing}: no such config file (from env JOBCTL_CONFIG)"


_UNKNOWN = "unknown key (`jobctl config show` lists every key)"
_MEANT_ATTEMPTS = "unknown key (did you mean retry.max_attempts?)"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("concurency = 4", "concurency: unknown key (did you mean concurrency?)"),
        ("[retry]\nmax_attempt = 4", "retry.max_attempt: " + _MEANT_ATTEMPTS),
        ("max_attempts = 4", "max_attempts: unknown key (did you mean retry.max_attempts?)"),
        ("[retries]\nmax_attempts = 4", "retries: unknown key (did you mean retry?)"),
        ("[retention]\nfailed = '1d'", f"retention.failed: {_UNKNOWN}"),
        ("colour = 'red'", f"colour: {_UNKNOWN}"),
        (
            "[retry]\nmax_attempts = 4\nconcurrency = 4",
            "retry.concurrency: unknown key (did you mean concurrency? "
            "it must come before any [table])",
        ),
        ("heartbeat = '10s'", f"heartbeat: {DERIVED['heartbeat']}"),
        ("retry = 3", "retry: must be a table ([retry]), got 3"),
    ],
)  # fmt: skip
def test_unknown_keys_are_errors_with_a_hint(tmp_path: Path, text: str, problem: str) -> None:
    path = write(tmp_path, text + "\n")
    assert error_of(path) == f"{path}: {problem}"


_LISTEN = 'must be "HOST:PORT" with a port from 1 to 65535, such as "127.0.0.1:9464"'


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("concurrency = true", "must be an integer from 1 to 100000, got true"),
        ("concurrency = 2.0", "must be an integer from 1 to 100000, got 2.0"),
        ('concurrency = "4"', 'must be an integer from 1 to 100000, got "4"'),
        ("concurrency = [4]", "must be an integer from 1 to 100000, got an array"),
        ("[concurrency]", "must be an integer from 1 to 100000, got a table"),
        ("db = 5", "must be a path (a non-empty string), got 5"),
        ('db = ""', 'must be a path (a non-empty string), got ""'),
        ('socket_group = "two words"', 'must be a group name, got "two words"'),
        ('log_format = "xml"', 'must be one of "logfmt", "json", got "xml"'),
        ("log_level = 3", 'must be one of "debug", "info", "warning", "error", got 3'),
        ('metrics_listen = "9464"', f'{_LISTEN}, got "9464"'),
        ('metrics_listen = "h:70000"', f'{_LISTEN}, got "h:70000"'),
        ('metrics_listen = ":9464"', f'{_LISTEN}, got ":9464"'),
        ('job_umask = "089"', 'must be an octal umask from "000" to "777", got "089"'),
        ("job_umask = 0o1777", 'must be an octal umask from "000" to "777", got 1023'),
        ("max_connections = 0", "must be an integer from 1 to 1000000, got 0"),
        ("max_header_bytes = 10", "must be an integer from 1024 to 16777216, got 10"),
        ("idle_timeout = 0.5", 'must be from 1s to 1h, got 0.5'),
    ],
)  # fmt: skip
def test_type_errors(tmp_path: Path, line: str, problem: str) -> None:
    path = write(tmp_path, line + "\n")
    key = line.split(maxsplit=1)[0].strip("[]")
    assert error_of(path) == f"{path}: {key}: {problem}"


# --------------------------------------------------------------------------- durations

_NOT_A_DURATION = "must be a duration such as 90s, 5m, 1h30m or 7d, or a number of seconds"


@pytest.mark.parametrize(
    ("value", "seconds"),
    [('"90s"', 90.0), ('"1h30m"', 5400.0), ("45", 45.0), ("2.5", 2.5), ('"1m500ms"', 60.5)],
)
def test_durations_take_the_duration_syntax_or_seconds(
    tmp_path: Path, value: str, seconds: float
) -> None:
    path = write(tmp_path, f"kill_grace = {value}\n")
    assert load(path, {}, {}, host=USER)[0].kill_grace == seconds


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('kill_grace = "5x"', f'{_NOT_A_DURATION}, got "5x"'),
        ("kill_grace = -1", 'must be from 0s to 1d, got -1'),
        ("kill_grace = 1e30", 'must be from 0s to 1d, got 1e+30'),
        ("concurrency = 99999999999999999999", "must be an integer from 1 to 100000, got "
         "99999999999999999999"),
        ("kill_grace = inf", f"{_NOT_A_DURATION}, got Infinity"),
        ("kill_grace = nan", f"{_NOT_A_DURATION}, got NaN"),
        ("kill_grace = true", f"{_NOT_A_DURATION}, got true"),
        ('lease_ttl = "500ms"', 'must be from 1s to 1d, got "500ms"'),
        ("[retention]\ndead = 0", "must be at least 1s, got 0"),
        ('[retry]\nbackoff_cap = "31d"', 'must be from 0s to 30d, got "31d"'),
    ],
)  # fmt: skip
def test_bad_durations(tmp_path: Path, line: str, problem: str) -> None:
    path = write(tmp_path, line + "\n")
    key = line.partition(" =")[0].replace("[retention]\n", "retention.")
    key = key.replace("[retry]\n", "retry.")
    assert error_of(path) == f"{path}: {key}: {problem}"


@pytest.mark.parametrize(
    "seconds", [0, 0.25, 1, 30, 90, 3600, 5400, 86400, 7 * 86400, 60.5, 1.0001, 123456.789]
)
def test_durations_print_exactly_and_parse_back(seconds: float) -> None:
    assert parse_duration(format_seconds(seconds)) == seconds


def test_format_seconds_is_short() -> None:
    shown = [format_seconds(s) for s in (30, 3600, 5400, 7 * 86400, 0.25)]
    assert shown == ["30s", "1h", "1h30m", "7d", "250ms"]


# --------------------------------------------------------------------------- other layers


def test_environment_errors_name_the_variable() -> None:
    assert error_of(env={"JOBCTL_CONCURRENCY": "many"}) == (
        'environment variable JOBCTL_CONCURRENCY: must be an integer from 1 to 100000, got "many"'
    )
    assert error_of(env={"JOBCTL_LEASE_TTL": "soon"}).startswith(
        f'environment variable JOBCTL_LEASE_TTL: {_NOT_A_DURATION}, got "soon"'
    )


def test_environment_values_are_text_so_numbers_may_be_spelled() -> None:
    settings, _ = load(
        None, {"JOBCTL_CONCURRENCY": " 12 ", "JOBCTL_KILL_GRACE": "2.5"}, {}, host=USER
    )
    assert settings.concurrency == 12 and settings.kill_grace == 2.5


def test_flag_errors_name_the_option() -> None:
    assert error_of(flags={"concurrency": 0}) == (
        "option --concurrency: must be an integer from 1 to 100000, got 0"
    )
    assert error_of(flags={"log_format": "xml"}).startswith("option --log-format: ")


def test_a_flag_that_is_not_a_setting_is_a_bug() -> None:
    with pytest.raises(TypeError):
        load(None, {}, {"colour": "red"}, host=USER)


def test_a_bad_file_is_an_error_even_where_a_flag_overrides_it(tmp_path: Path) -> None:
    """Reported now, not on the day someone drops the flag that hid it."""
    path = write(tmp_path, 'concurrency = "many"\n')
    assert error_of(path, flags={"concurrency": 4}).startswith(f"{path}: concurrency: ")


def test_every_problem_is_counted_and_the_first_named(tmp_path: Path) -> None:
    path = write(tmp_path, 'concurrency = "many"\nlease_ttl = 0\n')
    with pytest.raises(ConfigError) as info:
        load(path, {"JOBCTL_LOG_LEVEL": "loud"}, {}, host=USER)
    problems = info.value.details["problems"]
    assert len(problems) == 3 and info.value.message == problems[0] + " (and 2 more)"
    assert problems[2].startswith("environment variable JOBCTL_LOG_LEVEL: ")


@pytest.mark.parametrize(
    ("value", "umask"), [('"027"', "027"), ('"0o22"', "022"), ("0o077", "077"), ('"0"', "000")]
)
def test_job_umask_is_octal_text_or_a_toml_octal(tmp_path: Path, value: str, umask: str) -> None:
    path = write(tmp_path, f"job_umask = {value}\n")
    assert load(path, {}, {}, host=USER)[0].job_umask == umask


def test_connection_defaults_leave_room_for_other_users(tmp_path: Path) -> None:
    settings = load(None, {}, {}, host=USER)[0]
    assert settings.max_connections_per_uid < settings.max_connections
    assert (settings.job_umask, settings.max_header_bytes) == ("077", 65536)
    path = write(tmp_path, "max_connections = 10\nmax_connections_per_uid = 11\n")
    assert error_of(path) == (
        f"max_connections_per_uid = 11 (file {path}) is more than max_connections = 10 "
        f"(file {path}): one user could take every connection"
    )


def test_backoff_cap_below_base_names_both_sources(tmp_path: Path) -> None:
    path = write(tmp_path, '[retry]\nbackoff_base = "2h"\n')
    assert error_of(path) == (
        f"retry.backoff_cap = 1h (default) is less than retry.backoff_base = 2h "
        f"(file {path}): the cap must be at least the base"
    )
