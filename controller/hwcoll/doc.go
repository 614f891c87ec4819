// Package hwcoll is the controller's client of the HPE Slingshot fabric
// manager's hardware-collectives interface: it reserves a job's multicast
// addresses (a job object at the fabric manager, whose session token the
// job's processes present when they ask for addresses), lists the job
// objects and releases them.
//
// The protocol is the one Slurm's switch/hpe_slingshot plugin speaks
// (its collectives.c and rest.c); no HPE specification was available, so
// this client keeps to what that client shows:
//
//   - GET  {fm}/fabric/collectives/jobs/{id}: the job object, its
//     "sessionToken"; 404 when there is none.
//   - POST {fm}/fabric/collectives/jobs with {"jobID": id, "mcastLimit": n}:
//     creates it and answers the object, "sessionToken" included.
//   - GET  {fm}/fabric/collectives/jobs/: every job object, as
//     {"documentLinks": ["/fabric/collectives/jobs/{id}", ...]}.
//   - DELETE {fm}/fabric/collectives/jobs/{id}: releases the job's
//     addresses; a 2xx status is success.
//   - Error answers may carry a JSON "detail".
//   - Every request says Content-Type: application/json. With OAuth, it
//     carries "Authorization: Bearer <access_token>", the token got with an
//     OAuth2 client-credentials grant (form fields grant_type, client_id,
//     client_secret, scope=openid) from the endpoint named in the file
//     "endpoint" of the auth directory, the client's id and secret in the
//     files "client-id" and "client-secret"; on 401 or 403 the token is
//     fetched anew once and the request repeated. mTLS presents a client
//     certificate and checks the server's against a CA file.
//
// What is assumed rather than shown: that a 404 on DELETE means the object
// is already gone (Slurm logs it as a failure); that the token answer's
// "expires_in", when present, is seconds as RFC 6749 says (Slurm ignores
// it); and the shape of job IDs, "<prefix>-<Kubernetes owner UID>" where
// Slurm uses "<cluster>-<numeric job id>" (Slurm's own clean-up skips
// IDs whose suffix is not a number, so the two can share a fabric manager
// under distinct prefixes). Slurm's HTTP basic authentication (user "cxi")
// is not supported.
//
// A [Client] is safe for concurrent use.
package hwcoll
