"""Prints where `make install` puts the cellc Python package for PREFIX (argv[1]): the directory
of the running Python's own search path that lies under PREFIX (/usr/local: Debian's
/usr/local/lib/python3.X/dist-packages), else PREFIX/lib/python3.X/site-packages (then put it
on PYTHONPATH)."""
import os
import site
import sys

prefix = os.path.abspath(sys.argv[1])
for d in site.getsitepackages():
    rel = os.path.relpath(d, prefix).split(os.sep)
    if rel[0] == "lib" and rel[1:2] != ["python3"]:  # PREFIX/lib/python3.X/..., not Debian's own python3/
        print(d)
        break
else:
    print(os.path.join(prefix, "lib", "python%d.%d" % sys.version_info[:2], "site-packages"))
