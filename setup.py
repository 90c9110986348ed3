"""The optional C hot path of the tracer; rankscope works without it (a pure-Python fallback)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "rankscope.trace._ctrace",
            ["src/rankscope/trace/_ctrace.c"],
            optional=True,  # no compiler: the install still succeeds, the tracer runs in pure Python
            extra_compile_args=["-O2"],
        )
    ]
)
