package push

import "strconv"

// The pusher's metric labels come from fixed sets, never from what a push service answered:
// an endpoint that answers a new error body each time must not add a series each time.
// What is outside the sets is "other".

// providerLabel is the provider label: apns, fcm, webpush or other.
func providerLabel(provider string) string {
	switch provider {
	case APNs, FCM, WebPush:
		return provider
	}
	return "other"
}

// reasonLabel is the reason label of a failed push or a removed token: for APNs and FCM the
// reason when it is one they document, for Web Push (whose error bodies are free text) the
// status when it is one RFC 8030 and the services give meaning to, "unsent" when no request
// was made (a subscription or address refused), else "other".
func reasonLabel(provider string, res Result) string {
	switch provider {
	case APNs:
		if apnsReason(res.Reason) {
			return res.Reason
		}
	case FCM:
		if fcmReason(res.Reason) {
			return res.Reason
		}
	case WebPush:
		switch s := res.Status; {
		case s == 0:
			return "unsent"
		case s >= 300 && s <= 399:
			return "redirect"
		case s == 400, s == 401, s == 403, s == 404, s == 410, s == 413, s == 429:
			return strconv.Itoa(s)
		}
	}
	return "other"
}

// apnsReason reports whether r is one of the reasons APNs documents for an error answer.
func apnsReason(r string) bool {
	switch r {
	case "BadCollapseId", "BadDeviceToken", "BadExpirationDate", "BadMessageId", "BadPriority", "BadTopic",
		"DeviceTokenNotForTopic", "DuplicateHeaders", "IdleTimeout", "InvalidPushType", "MissingDeviceToken",
		"MissingTopic", "PayloadEmpty", "TopicDisallowed", "BadCertificate", "BadCertificateEnvironment",
		"ExpiredProviderToken", "Forbidden", "InvalidProviderToken", "MissingProviderToken",
		"UnrelatedKeyIdInToken", "BadPath", "MethodNotAllowed", "ExpiredToken", "Unregistered",
		"PayloadTooLarge", "TooManyProviderTokenUpdates", "TooManyRequests", "InternalServerError",
		"ServiceUnavailable", "Shutdown":
		return true
	}
	return false
}

// fcmReason reports whether r is one of FCM's documented error codes or a Google API status
// it answers with.
func fcmReason(r string) bool {
	switch r {
	case "UNSPECIFIED_ERROR", "INVALID_ARGUMENT", "UNREGISTERED", "SENDER_ID_MISMATCH", "QUOTA_EXCEEDED",
		"UNAVAILABLE", "INTERNAL", "THIRD_PARTY_AUTH_ERROR", "NOT_FOUND", "PERMISSION_DENIED",
		"UNAUTHENTICATED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION":
		return true
	}
	return false
}
