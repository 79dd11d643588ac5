"""An install command whose first run crosses another program's BusyBox crontab run.

Usage: crontab_race.py ORDER BUSYBOX SPOOL NOTE FILE (the QL_CRONTAB_INSTALL of a test).

BusyBox's crontab writes every crontab through one temp name, `<user>.new`, opened with
O_TRUNC|O_APPEND and then renamed. The other program here is a `crontab -e` that adds a
line: it reads the crontab, opens `<user>.new`, and only then writes. Our install
(`busybox crontab -c SPOOL -` fed with FILE) opens the same file before that write, so both
texts end up in it, ours first, as they do when the two runs happen to meet:
- ORDER=ours-renames: ours is written and renamed first (exits 0), the other's text is
  appended to what is now the crontab and its rename fails;
- ORDER=other-renames: ours is written, then the other's text, the other renames first,
  and ours fails with "can't move '<user>.new' to '<user>'".
Both processes are real BusyBox; only the order of their steps is fixed, so that the test
sees the same meeting every time. The first run writes "ours=RC other=RC" to NOTE; every
later run is a plain `busybox crontab -c SPOOL FILE`.
"""
import os
import pwd
import subprocess
import sys
import time

ADDED = b"# added by another program\n"


def opened(pid: int, path: str) -> bool:
    folder = f"/proc/{pid}/fd"
    for fd in os.listdir(folder):
        try:
            if os.readlink(os.path.join(folder, fd)) == path:
                return True
        except OSError:
            pass
    return False


def wait(predicate) -> None:
    deadline = time.monotonic() + 20
    while not predicate():
        if time.monotonic() > deadline:
            sys.exit("crontab_race: the other crontab run did not get that far")
        time.sleep(0.005)


def main() -> int:
    order, busybox, spool, note, path = sys.argv[1:]
    if os.path.exists(note):
        return subprocess.run([busybox, "crontab", "-c", spool, path]).returncode
    listed = subprocess.run([busybox, "crontab", "-c", spool, "-l"], capture_output=True)
    theirs = (listed.stdout if listed.returncode == 0 else b"") + ADDED
    temp = os.path.join(os.path.realpath(spool), pwd.getpwuid(os.geteuid()).pw_name + ".new")
    crontab = [busybox, "crontab", "-c", spool, "-"]
    other = subprocess.Popen(crontab, stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    wait(lambda: opened(other.pid, temp))
    ours = subprocess.Popen(crontab, stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    wait(lambda: opened(ours.pid, temp))
    with open(path, "rb") as fh:
        text = fh.read()
    if order == "ours-renames":
        _, said = ours.communicate(text)
        other.communicate(theirs)
    else:
        ours.stdin.write(text)
        ours.stdin.flush()
        wait(lambda: os.stat(temp).st_size >= len(text))
        other.communicate(theirs)
        _, said = ours.communicate()
    with open(note, "w") as fh:
        fh.write(f"ours={ours.returncode} other={other.returncode}\n")
    sys.stderr.buffer.write(said)
    return ours.returncode


if __name__ == "__main__":
    sys.exit(main())
