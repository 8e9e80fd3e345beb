module github.com/cachewatch/cachewatch/bench

go 1.26

replace github.com/cachewatch/cachewatch => ../

require github.com/cachewatch/cachewatch v0.0.0-00010101000000-000000000000
