"""The HiveMind transport (``communication=hivemind``): a libp2p DHT for membership, direct
streams for payloads. Kept empty so that importing one part (the member records, say) does not
start importing hivemind itself; the backend is ``genrl_swarm.comm.hivemind.dht.HivemindBackend``."""
