import pytest

from xstage.cli import main


@pytest.fixture
def cli(capsys):
    """``cli(*argv) -> (exit status, stdout, stderr)``: ``xstage`` run in-process with ``argv``."""
    def run(*argv):
        code = main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err
    return run
