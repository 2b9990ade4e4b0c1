module ustackfixture/goprog

go 1.26
