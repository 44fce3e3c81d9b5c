"""The registry operations behind the managers' HTTP API, one service per concern (topics,
lag, consumer groups, API keys, brokers, producers and consumers), over one shared
``ServiceContext``. A service answers with the body and whether it created something; the
route chooses the status code.

Threads: HTTP threads call every public method; the leader-duties thread calls
``TopicService.resume_pending`` and ``ClientService.expire_idle_clients``.
"""

from __future__ import annotations

from dataclasses import dataclass

from manager.services.brokers import BrokerOperations
from manager.services.clients import ClientService
from manager.services.context import ServiceContext, check_outcome
from manager.services.groups import GroupService
from manager.services.keys import KeyService
from manager.services.lag import LagService
from manager.services.topics import TopicService, replica_specs


@dataclass(frozen=True)
class ManagerServices:
    topics: TopicService
    lag: LagService
    groups: GroupService
    keys: KeyService
    brokers: BrokerOperations
    clients: ClientService

    @classmethod
    def over(cls, context: ServiceContext) -> ManagerServices:
        return cls(
            TopicService(context),
            LagService(context),
            GroupService(context),
            KeyService(context),
            BrokerOperations(context),
            ClientService(context),
        )


__all__ = [
    "BrokerOperations",
    "ClientService",
    "GroupService",
    "KeyService",
    "LagService",
    "ManagerServices",
    "ServiceContext",
    "TopicService",
    "check_outcome",
    "replica_specs",
]
