module example.com/cairn-go

go 1.21
