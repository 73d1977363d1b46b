"""The session dev server answers with signoff's search attributes registered."""

from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest

from signoff.devserver import SEARCH_ATTRIBUTES


async def test_search_attributes_registered(temporal_client):
    resp = await temporal_client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=temporal_client.namespace)
    )
    assert set(SEARCH_ATTRIBUTES) <= set(resp.custom_attributes)
