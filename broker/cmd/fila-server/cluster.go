package main

import (
	"context"
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/fila-mq/fila/broker/internal/auth"
	"github.com/fila-mq/fila/broker/internal/cluster"
	"github.com/fila-mq/fila/broker/internal/config"
	"github.com/fila-mq/fila/broker/internal/node"
	"github.com/fila-mq/fila/broker/internal/rtconf"
	"github.com/fila-mq/fila/broker/internal/server"
	"github.com/fila-mq/fila/broker/internal/shard"
	"github.com/fila-mq/fila/broker/internal/store"
)

// metaTimeout bounds how long an admin change waits for the meta group.
const metaTimeout = 10 * time.Second

// openCluster starts this node's part of the cluster: the Raft groups,
// the peer transport, and the meta group's hold on API keys and the
// runtime config (their changes become meta proposals).
func openCluster(cfg config.Config, st *store.Disk, shardCfg shard.Config, hooks *node.Hooks,
	scfg server.Config, rt *rtconf.Store, log *slog.Logger) (*cluster.Node, error) {
	cc := cfg.Cluster
	cn, err := cluster.Open(cluster.Config{
		NodeID:            cc.NodeID,
		ClusterID:         cc.ClusterID,
		PeerListenAddr:    cc.PeerListenAddr,
		AdvertiseAddr:     cc.AdvertiseAddr,
		Peers:             cc.Peers,
		ReplicationFactor: cc.ReplicationFactor,
		TickInterval:      cc.TickInterval,
		ElectionTicks:     cc.ElectionTicks,
		HeartbeatTicks:    cc.HeartbeatTicks,
		SnapshotEvery:     cc.SnapshotLogSize,
		MetaSnapshotEvery: uint64(cc.MetaSnapshotEntries),
		SnapshotRate:      cc.SnapshotRate,
		Join:              cc.Join,
		TLS:               peerTLS(scfg.TLS),
		Shard:             shardCfg,
		Effects:           node.ClusterEffects(hooks, scfg.Auth, rt),
		Logger:            log.With("component", "cluster"),
		Rebuild:           st.Repaired(),
	}, st)
	if err != nil {
		return nil, err
	}
	if keys := scfg.Auth; keys != nil {
		keys.SetProposer(func(c auth.Change) error {
			ctx, cancel := context.WithTimeout(context.Background(), metaTimeout)
			defer cancel()
			return cn.ProposeAuth(ctx, c.AppendTo(nil))
		})
	}
	rt.SetProposer(func(c rtconf.Change) error {
		ctx, cancel := context.WithTimeout(context.Background(), metaTimeout)
		defer cancel()
		return cn.ProposeConfig(ctx, c.AppendTo(nil))
	})
	log.Info("cluster node started", "node", cc.NodeID, "peer_addr", cn.PeerAddr(), "advertise_addr", cc.AdvertiseAddr, "peers", len(cc.Peers))
	return cn, nil
}

// peerTLS derives the peer transport's TLS from the client listener's:
// each node presents its certificate on both ends, and with
// tls.client_ca_file set, verifies its peer's against that CA (mTLS).
// nil without TLS.
func peerTLS(server *tls.Config) *tls.Config {
	if server == nil {
		return nil
	}
	c := server.Clone()
	if c.ClientCAs != nil {
		c.RootCAs = c.ClientCAs
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return c
}
