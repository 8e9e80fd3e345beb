module github.com/cachewatch/cachewatch/bench

go 1.26

replace github.com/cachewatch/cachewatch => ../
