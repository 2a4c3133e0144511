"""The shared loader of botocore's data: it keeps of endpoints.json the entries of sqsjkr's own
services, and those resolve as botocore's whole file resolves them; it lists those services alone.
"""

from __future__ import annotations

from typing import Any

import botocore
import botocore.session
import pytest
from botocore.awsrequest import AWSResponse
from botocore.loaders import Loader
from botocore.regions import EndpointResolver

from sqsjkr.backends.aws import (
    SERVICES,
    OwnServicesFileLoader,
    OwnServicesLoader,
    make_client,
    make_session,
)


def test_the_loader_keeps_only_sqsjkrs_services_of_every_partition() -> None:
    whole = Loader().load_data("endpoints")
    kept = Loader(file_loader=OwnServicesFileLoader()).load_data("endpoints")
    assert [p["partition"] for p in kept["partitions"]] == [
        p["partition"] for p in whole["partitions"]
    ]
    for ours, theirs in zip(kept["partitions"], whole["partitions"], strict=True):
        assert set(ours["services"]) == SERVICES & set(theirs["services"])
        assert {k: v for k, v in ours.items() if k != "services"} == {
            k: v for k, v in theirs.items() if k != "services"
        }
        for name, service in ours["services"].items():
            assert service == theirs["services"][name]
    assert "s3" not in kept["partitions"][0]["services"]  # the file is read right
    assert set(kept["partitions"][0]["services"]) >= SERVICES


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_each_service_resolves_in_every_region_as_with_the_whole_file(service: str) -> None:
    whole = EndpointResolver(Loader().load_data("endpoints"))
    kept = EndpointResolver(Loader(file_loader=OwnServicesFileLoader()).load_data("endpoints"))
    for partition in whole.get_available_partitions():
        regions = whole.get_available_endpoints(service, partition, allow_non_regional=True)
        assert kept.get_available_endpoints(service, partition, allow_non_regional=True) == regions
        for region in [*regions, "nowhere-1"]:
            for fips in (False, True):
                assert kept.construct_endpoint(
                    service, region, partition, use_fips_endpoint=fips
                ) == whole.construct_endpoint(service, region, partition, use_fips_endpoint=fips)


def test_a_client_of_another_service_is_refused() -> None:
    session = make_session(region="us-east-1")
    with pytest.raises(ValueError, match="'s3' is not one of sqsjkr's services"):
        make_client(session, "s3")


@pytest.mark.parametrize("type_name", ["service-2", "endpoint-rule-set-1", "paginators-1"])
def test_the_loader_lists_sqsjkrs_services_that_botocore_has_data_of(type_name: str) -> None:
    whole = Loader().list_available_services(type_name)
    assert "s3" in whole  # botocore's own walk finds every service
    assert OwnServicesLoader().list_available_services(type_name) == sorted(SERVICES & set(whole))


def test_every_service_of_sqsjkr_makes_a_client_with_the_shared_loader() -> None:
    session = make_session(region="us-east-1")
    session.set_credentials("key", "secret")
    for service in sorted(SERVICES):
        assert make_client(session, service).meta.service_model.service_name == service


def _transact_url(client: Any, table: str) -> str:
    """Where client sends a TransactWriteItems on table (stopped before it leaves the host)."""
    urls: list[str] = []

    def stop(request: Any, **_: Any) -> AWSResponse:
        urls.append(request.url)
        return AWSResponse(request.url, 200, {}, _Body(b"{}"))

    client.meta.events.register("before-send.dynamodb.TransactWriteItems", stop)
    put = {"Put": {"TableName": table, "Item": {"Id": {"S": "a"}, "Type": {"S": "b"}}}}
    client.transact_write_items(TransactItems=[put, put])
    return urls[0]


class _Body:
    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, **_: Any) -> Any:
        yield self._data

    def read(self, *_: Any) -> bytes:
        return self._data


@pytest.mark.parametrize("region", ["us-east-1", "eu-west-1", "cn-north-1", "us-gov-west-1"])
def test_transact_write_items_goes_where_botocores_own_client_sends_it(
    region: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB"):
        monkeypatch.delenv(name, raising=False)
    ours = make_client(make_session(region=region), "dynamodb")
    # Its endpoint parameter derived from every item's table is gone (a JMESPath each call).
    model = ours.meta.service_model.operation_model("TransactWriteItems")
    assert model.operation_context_parameters == []
    stock = botocore.session.get_session()
    stock.set_config_variable("region", region)
    theirs = stock.create_client("dynamodb")
    for client in (ours, theirs):
        client.meta.events.register("choose-signer", lambda **_: botocore.UNSIGNED)
    assert _transact_url(ours, "jobs") == _transact_url(theirs, "jobs")
