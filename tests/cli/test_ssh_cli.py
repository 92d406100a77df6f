"""``corral ssh``'s command line: what goes to ssh as options, what is the remote command,
and the options that carry the connection over the API and pin the job's host key. (The
whole way, through a real stack and sshd: ``tests/e2e/test_job_ssh.py``.)"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from corral.commands.errors import UsageProblem
from corral.commands.ssh import proxy_command, split_ssh_args, ssh_argv


@pytest.mark.parametrize(
    ("args", "options", "command"),
    [
        ([], [], []),
        (["cat", "some-file"], [], ["cat", "some-file"]),
        (["-i", "key", "-v", "cat", "-n", "f"], ["-i", "key", "-v"], ["cat", "-n", "f"]),
        (
            ["-oIdentitiesOnly=yes", "-L", "6006:localhost:6006"],
            ["-oIdentitiesOnly=yes", "-L", "6006:localhost:6006"],
            [],
        ),
        (["-t", "--", "-weird-command"], ["-t"], ["-weird-command"]),
    ],
)
def test_leading_options_go_to_ssh_and_the_rest_is_the_command(
    args: list[str], options: list[str], command: list[str]
) -> None:
    assert split_ssh_args(args) == (options, command)


def test_an_option_missing_its_argument_is_refused() -> None:
    with pytest.raises(UsageProblem, match="-i needs an argument"):
        split_ssh_args(["-i"])


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs ssh")
def test_the_users_options_come_first_and_the_host_key_is_pinned(tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    argv = ssh_argv("job-01abc", "worker-1", "job-01abc", known, ["-i", "k", "hostname"])
    assert argv[1:3] == ["-i", "k"]  # for ssh the first value of a setting wins
    assert argv[-2:] == ["worker-1.job-01abc", "hostname"]
    assert f"UserKnownHostsFile={known}" in argv
    assert "StrictHostKeyChecking=yes" in argv
    assert "HostKeyAlias=corral-job-01abc" in argv
    proxy = next(a for a in argv if a.startswith("ProxyCommand="))
    assert proxy.endswith("-m corral ssh-proxy job-01abc --task worker-1")
    assert "%" not in proxy_command("job-01abc", "worker-1").replace("%%", "")
