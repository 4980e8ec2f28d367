"""Every botocore error becomes one of awsflock's, with one line naming the problem and the fix."""

from __future__ import annotations

import inspect

import pytest
from botocore import exceptions as bx

from awsflock import errors
from awsflock.stores.dynamodb import DynamoDBStore as Store


def _botocore_errors() -> list[type[bx.BotoCoreError]]:
    return sorted(
        (
            cls
            for _, cls in inspect.getmembers(bx, inspect.isclass)
            if issubclass(cls, bx.BotoCoreError)
        ),
        key=lambda cls: cls.__name__,
    )


def _instance(cls: type[bx.BotoCoreError]) -> bx.BotoCoreError:
    # Each class formats its own keyword arguments; a message with a line break stands in.
    exc = cls.__new__(cls)
    Exception.__init__(exc, "something went wrong\n  on a second line")
    exc.kwargs = {}
    return exc


@pytest.mark.parametrize("cls", _botocore_errors(), ids=lambda cls: cls.__name__)
def test_every_botocore_error_is_translated_to_one_line(cls):
    store = Store("locks", region="eu-west-1")
    with pytest.raises(errors.AwsflockError) as caught, store.translate_errors("acquire"):
        raise _instance(cls)
    line = caught.value.one_line()
    assert "\n" not in line and line.strip() == line
    assert caught.value.exit_code in (1, 2)
    assert isinstance(caught.value.__cause__, cls)


def test_an_invalid_endpoint_url_names_the_url_and_the_fix():
    store = Store("locks", region="eu-west-1", endpoint_url="http://not a url")
    with pytest.raises(errors.ConfigurationError) as caught:
        store.client  # noqa: B018  # building the client is what fails
    assert "'http://not a url'" in caught.value.one_line()
    assert "--endpoint-url" in caught.value.hint


def test_other_value_errors_are_not_mistaken_for_settings():
    store = Store("locks", region="eu-west-1")
    with pytest.raises(ValueError, match="a bug"), store.translate_errors("acquire"):
        raise ValueError("a bug")


def _cancelled(*codes: str) -> bx.ClientError:
    """A cancelled transaction, with one reason per item."""
    reasons = [
        {"Code": code, **({"Message": "Item size has exceeded the maximum allowed size"}
                          if code == "ValidationError" else {})}
        for code in codes
    ]  # fmt: skip
    response = {
        "Error": {"Code": "TransactionCanceledException", "Message": "Transaction cancelled"},
        "CancellationReasons": reasons,
    }
    return bx.ClientError(response, "TransactWriteItems")  # type: ignore[arg-type]


def test_a_transaction_refused_for_an_item_too_large_is_no_conflict_to_wait_out():
    # An item over 400 KB (a long audit reason, a record grown too big) cancels the whole
    # transaction with a ValidationError reason: nothing was written, and the same request is
    # refused every time. It must not be retried as a conflict until the budget runs out.
    store = Store("locks", region="eu-west-1")
    with pytest.raises(errors.AwsflockError) as caught, store.translate_errors("force-release"):
        raise _cancelled("None", "ValidationError")
    err = caught.value
    assert type(err) is errors.StoreError and not err.maybe_applied
    line = err.one_line()
    assert "Item size has exceeded the maximum allowed size" in line
    assert "nothing was written" in line
    with pytest.raises(errors.Throttled), store.translate_errors("acquire"):  # a conflict
        raise _cancelled("None", "TransactionConflict")
