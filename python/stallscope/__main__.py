"""`python -m stallscope ARGS`: the same as the `stallscope` command: runs the binary the platform
wheel carries in this package (stallscope/_bundle/bin/stallscope). The package-only wheel and a
source tree have none: a one-line error, exit 2.
"""
import os
import sys


def main():
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bundle", "bin", "stallscope")
    if not os.access(exe, os.X_OK):
        sys.stderr.write(f"python -m stallscope: {exe}: not found: this stallscope package has no "
                         "binaries; install the platform wheel (stallscope-*-manylinux_*.whl) or "
                         "run the bundle's bin/stallscope\n")
        return 2
    os.execv(exe, [exe] + sys.argv[1:])
    return 2  # not reached


if __name__ == "__main__":
    sys.exit(main())
