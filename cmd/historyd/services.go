package main

import (
	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/exchange"
	"github.com/historyd/historyd/internal/server"
)

// registerServices registers historyd's three services on srv over the engine e and the Exchange
// ex, and makes their health statuses follow the database's.
func registerServices(srv *server.Server, e *engine, ex exchange.Service, cfg config) {
	server.RegisterExchange(srv, ex, cfg.Exchange.streamOptions(cfg.Store.Engine)...)
	server.RegisterHistory(srv, e.Store, cfg.History.streamOptions()...) // follows the store's health itself
	server.RegisterAdmin(srv, e.backup)
	// With sqlite and postgres the Exchange lives in the store's database, and with sqlite the
	// AdminService's Backup reads it: while the database is unusable their calls fail as
	// HistoryService's do, so their statuses say NOT_SERVING as its does (they stayed SERVING, and
	// a client that checks historyd.v1.ExchangeService sent its mail to a server that could not
	// take it). PostgreSQL's Backup is refused whatever the database's state, so AdminService does
	// not follow it there. The memory engine's Exchange is in memory, and its store has no storage
	// health.
	if sh, ok := e.Store.(server.StorageHealth); ok && e.exchange != nil {
		services := []string{historyv1.ExchangeService_ServiceDesc.ServiceName}
		if e.name == storeSQLite {
			services = append(services, historyv1.AdminService_ServiceDesc.ServiceName)
		}
		srv.FollowStorage(sh, services...)
	}
}
