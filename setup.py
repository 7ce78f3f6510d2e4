# cffi cannot be declared in pyproject.toml alone: this file only names the cffi builder.
from setuptools import setup

setup(cffi_modules=["toolkit/native/_build.py:ffibuilder"])
